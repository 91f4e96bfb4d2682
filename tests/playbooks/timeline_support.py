"""Shared by the timeline's unit tests: a canned context, series and a client answering from a function."""

from __future__ import annotations

import numpy as np

from playbooks import timeline as tl
from playbooks.alignment import StepAxis
from playbooks.profiles import PROFILES
from playbooks.prometheus import InstantSample, PrometheusClient, Series

NOW = 1_773_000_000.0
START, END = NOW, NOW + 3600.0
TIMES = tuple(NOW + 15.0 * i for i in range(241))


def make_ctx(profile: str = "amd", gpus: int = 32, hosts: int = 4, **kw) -> tl.TimelineContext:
    axis = StepAxis.from_samples([NOW + 30.0 * i for i in range(121)], list(range(121)))
    return tl.TimelineContext(
        profile=PROFILES[profile], start=START, end=END, axis=axis, interval=15.0, gpu_series=gpus,
        host_series=hosts, **kw,
    )  # fmt: skip


def make_series(labels: dict[str, str], values) -> Series:
    return Series(labels, TIMES, tuple(float(v) for v in values))


class CannedClient(PrometheusClient):
    """Answers range queries from a function of the PromQL; counts what it was asked.

    `scores` (one sample a device: its score) answers a band's score query, the one range query that is no
    band and names none of those devices: every device's series on the query's grid, each one off the
    median by its score at a grid time of its own, so that the scores taken from them are these."""

    def __init__(self, answer) -> None:
        super().__init__("http://127.0.0.1:9")
        self.answer = answer
        self.asked: list[str] = []
        self.scores: list[InstantSample] = []

    def query_range(self, promql, start, end, step=None):
        self.asked.append(promql)
        named = any(f'"{v}"' in promql for s in self.scores for v in s.labels.values())
        if self.scores and '"stat"' not in promql and not named:
            n = len(self.scores) + 1
            times = tuple(start + step * k for k in range(n))
            return [Series(s.labels, times, tuple(50.0 + (s.value if k == i else 0.0) for k in range(n)))
                    for i, s in enumerate(self.scores)]  # fmt: skip
        return self.answer(promql)

    def query(self, promql, at=None):
        self.asked.append(promql)
        return self.instant

    def series(self, matchers, start=None, end=None):
        return []


def make_pack(score: float, labels: dict[str, str] | None = None, n: int = 5) -> list[InstantSample]:
    """Return the scores of `n` typical series (GPUs 0..n-1 of a host): what the score query returns besides
    the outliers."""
    base = labels or {"host": "n99"}
    return [InstantSample({**base, "gpu": str(i)}, END, score) for i in range(n)]


def make_gpu(host: str, gpu: int, base: float, bump: float = 0.0) -> Series:
    values = np.full(len(TIMES), float(base))
    values[150:] += bump
    return make_series({"host": host, "gpu": str(gpu)}, values)
