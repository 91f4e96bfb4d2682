"""The comparison's thermal straggler is one GPU both hot and throttled (#10, corpus F seed 39 case 28): a
restored run whose GPUs run cooler, so its hottest GPU stands further above their median, and whose slowest
clock is another host's GPU, is two spreads and no straggler. The figures are canned (a healthy pair's); the
three hottest and three slowest GPUs are what `extreme_gpus` asks Prometheus for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from playbooks import _compare_verdict
from playbooks._compare_figures import METRICS, Row


def _rows() -> dict[str, Row]:
    values = {"gpu_temp": (80.0, 73.0), "gpu_temp_max": (86.0, 85.0), "gpu_clock": (1970.0, 1970.0),
              "gpu_clock_min": (1929.0, 1782.0)}  # fmt: skip
    metric = {m.name: m for m in METRICS}
    return {
        name: Row(metric[name], metric[name].signals[0], [f"q_{name}", f"q_{name}"], list(v), [0.5, 0.5])
        for name, v in values.items()
    }


@pytest.mark.parametrize("same_gpu", [False, True])
def test_a_thermal_straggler_is_one_gpu_both_hottest_and_slowest(monkeypatch, same_gpu):
    hottest = [("node0042", "7", 85.0), ("node0017", "2", 84.0), ("node0003", "5", 84.0)]
    slowest = (
        [("node0042", "7", 1782.0)] if same_gpu else [("node0031", "0", 1782.0), ("node0031", "1", 1790.0)]
    )
    slowest += [("node0008", "4", 1850.0)]

    def extreme(job, signal, top, concurrency):
        return hottest if top else slowest

    monkeypatch.setattr(_compare_verdict, "extreme_gpus", extreme)
    jobs = [SimpleNamespace(label="fresh"), SimpleNamespace(label="restored")]
    pair = _compare_verdict._Pair(jobs, 0, 1, _rows(), {}, 1)
    found = _compare_verdict._thermal_verdict(pair)
    if same_gpu:
        assert found is not None and found.klass == "thermal-straggler"
        assert found.culprits == [{"host": "node0042", "gpu": "7"}]
    else:
        assert found is None
