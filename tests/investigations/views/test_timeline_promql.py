"""A free PromQL panel on the timeline (issue 13), against a real Prometheus serving a generated job: drawn on
the step axis like any panel, cached, a bad expression a 400 with Prometheus's message, and (security)
the expression only ever the `query` of one range query, its label values drawn as text."""

from __future__ import annotations

import pytest
from django.urls import reverse

from playbooks.prometheus import PrometheusClient

from .test_timeline import served as served  # noqa: F401 (the fixture: a generated job served by a real Prometheus)

pytestmark = pytest.mark.django_db

STEP_GAUGE = "tb_step or training_step"
HOSTILE = '<img src=x onerror="alert(1)">'


def _get(client, investigation, job, q: str, **extra):
    url = reverse("investigations:timeline_promql", args=[investigation.pk])
    return client.get(url, {"job": job.pk, "q": q, "x": "step"} | extra)


def test_an_expression_is_drawn_on_the_step_axis_and_cached(alice_client, served) -> None:
    investigation, job, truth = served
    response = _get(alice_client, investigation, job, STEP_GAUGE)
    assert response.status_code == 200, response.content
    body = response.json()
    figure = body["figure"]
    assert figure["layout"]["meta"]["panel"] == "promql" and figure["layout"]["meta"]["xmode"] == "step"
    assert "PromQL: tb_step or training_step" in figure["layout"]["title"]["text"]
    xs = [x for d in figure["data"] for x in d["x"] if x is not None]
    assert xs and min(xs) >= 0  # steps, not times
    assert body["queries"] >= 1
    again = _get(alice_client, investigation, job, STEP_GAUGE).json()
    assert again["queries"] == 0 and again["figure"]["data"] == figure["data"]  # from the shared cache
    # The same expression on a time axis: times.
    timed = _get(alice_client, investigation, job, STEP_GAUGE, x="time-utc").json()
    assert str(timed["figure"]["data"][0]["x"][0]).startswith("20")


def test_a_bad_expression_is_a_message_not_a_500(alice_client, served) -> None:
    investigation, job, _ = served
    response = _get(alice_client, investigation, job, "rate(node_load1[5m]")
    assert response.status_code == 400
    assert response.json()["error"].startswith("Prometheus refused the expression (bad_data)")
    assert _get(alice_client, investigation, job, "   ").status_code == 400
    assert "at most 2,000" in _get(alice_client, investigation, job, "up or " * 400).json()["error"]


def test_the_expression_is_only_a_query_range_parameter(alice_client, served, monkeypatch) -> None:
    """Whatever it holds (an API path, a second parameter, a new line), the expression reaches Prometheus
    only as the `query` of /api/v1/query_range, verbatim: it cannot call another endpoint."""
    investigation, job, _ = served
    sent: list[tuple[str, dict]] = []
    real_api = PrometheusClient._api

    def spy(self, path, params, **kw):
        sent.append((path, dict(params)))
        return real_api(self, path, params, **kw)

    monkeypatch.setattr(PrometheusClient, "_api", spy)
    _get(alice_client, investigation, job, STEP_GAUGE)  # the context is built (and cached) first
    sent.clear()
    for expr in (
        "up&match[]=up",
        "/api/v1/admin/tsdb/delete_series?match[]=up",
        "../../admin/tsdb/snapshot",
        "up\nPOST /api/v1/admin/tsdb/clean_tombstones",
    ):
        response = _get(alice_client, investigation, job, expr)
        assert response.status_code == 400, expr
        assert "Prometheus refused the expression" in response.json()["error"]
    assert [p for p, _ in sent] == ["/api/v1/query_range"] * 4
    assert [q["query"] for _, q in sent] == [
        "up&match[]=up",
        "/api/v1/admin/tsdb/delete_series?match[]=up",
        "../../admin/tsdb/snapshot",
        "up\nPOST /api/v1/admin/tsdb/clean_tombstones",
    ]


def test_label_values_are_drawn_as_text(alice_client, served) -> None:
    investigation, job, _ = served
    expr = (
        f'label_replace(max({STEP_GAUGE}), "host", "{HOSTILE.replace(chr(34), chr(92) + chr(34))}", "", "")'
    )
    response = _get(alice_client, investigation, job, expr)
    assert response.status_code == 200, response.content
    (trace,) = response.json()["figure"]["data"]
    assert trace["meta"]["host"] == HOSTILE  # the label itself, as data
    assert "<img" not in trace["name"] and "&lt;img src=x" in trace["name"]  # Plotly draws it as text
    assert "<img" not in response.json()["figure"]["layout"]["title"]["text"]
