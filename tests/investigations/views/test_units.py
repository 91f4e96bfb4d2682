"""The comparison's metric rows by name and unit at sensible precision, never "mem_used 2.49302e+11"."""

from __future__ import annotations

import pytest

from investigations.views._units import format_value, metric_meta


@pytest.mark.parametrize(
    "name, value, label, shown",
    [
        ("mem_used", 249_302_000_000.0, "Host memory used", "249 GB"),
        ("gpu_temp_max", 76.5, "GPU temperature (hottest GPUs)", "76.5 °C"),
        ("gpu_power", 641.25, "GPU power", "641 W"),
        ("gpu_util", 97.5, "GPU utilisation", "97.5 %"),
        ("gpu_clock_min", 2082.0, "GPU core clock (slowest GPUs)", "2,082 MHz"),
        ("step_time", 20.5702, "Step time", "20.6 s"),
        ("tcp_retransmits", 944.3177, "TCP retransmits, all hosts", "944 segments/s"),
        ("rdma_retransmits", 0.0093, "RDMA retransmitted packets, all hosts", "0.0093 packets/s"),
        ("procs_running", 26.5, "Runnable processes", "26.5 processes"),
        ("no_such_metric", 1234567.0, "no such metric", "1,234,567"),
    ],
)
def test_each_metric_has_a_name_and_a_unit(name, value, label, shown) -> None:
    meta = metric_meta(name)
    assert meta["label"] == label
    assert format_value(value, meta["unit"]) == shown


def test_missing_and_odd_values_are_said_plainly() -> None:
    assert format_value(None, "W") == "—"
    assert format_value(float("nan"), "W") == "nan"
    assert format_value(0.0, "bytes") == "0 B"
