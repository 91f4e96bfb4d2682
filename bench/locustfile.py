"""Locust users of `bench/load_test.py`: signed-in engineers browsing Stepwise (not a test of the suite).

Each simulated user has its own signed-in session (made by the driver, read from the JSON file named by
STEPWISE_LOAD_PLAN) and browses: the investigations list (also filtered), an investigation's page, its report, and the
panels of its timeline (served from the shared cache, so no Prometheus time is measured).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading

from locust import HttpUser, between, events, task

PLAN = json.loads(open(os.environ["STEPWISE_LOAD_PLAN"], encoding="utf-8").read())
_ACCOUNTS = itertools.cycle(PLAN["users"])
_LOCK = threading.Lock()


_TIMES: list[tuple[str, float, bool]] = []


@events.request.add_listener
def _record(request_type, name, response_time, response_length, exception=None, **kw) -> None:
    _TIMES.append((name, response_time, exception is None))


@events.test_stop.add_listener
def _save(**kw) -> None:
    # Every request's time, so that the driver can compute percentiles over the pages without sign-in.
    with open(os.environ["STEPWISE_LOAD_TIMES"], "w", encoding="utf-8") as fh:
        json.dump(_TIMES, fh)


class Engineer(HttpUser):
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        with _LOCK:
            cookie, value = next(_ACCOUNTS)
        self.client.cookies.set(cookie, value)
        resp = self.client.get("/", name="investigations list")
        if "/login/" in resp.url:
            raise RuntimeError("the session made by the driver is not signed in")

    def _investigation(self) -> int:
        return random.choice(PLAN["investigations"])

    @task(3)
    def investigations_list(self) -> None:
        self.client.get("/", name="investigations list")

    @task(1)
    def investigations_filtered(self) -> None:
        self.client.get("/?q=" + random.choice(PLAN["searches"]), name="investigations list (search)")

    @task(3)
    def investigation_page(self) -> None:
        self.client.get(f"/investigations/{self._investigation()}/", name="investigation page")

    @task(2)
    def report_page(self) -> None:
        self.client.get(f"/investigations/{self._investigation()}/report/", name="report page")

    @task(4)
    def timeline_panel(self) -> None:
        pk = self._investigation()
        panel = random.choice(PLAN["panels"])
        with self.client.get(
            f"/investigations/{pk}/timeline/panels/{panel}/",
            name="timeline panel (cached)",
            catch_response=True,
        ) as resp:
            if resp.status_code == 200 and resp.json().get("queries"):
                resp.failure("the panel was not served from the cache: it queried Prometheus")
