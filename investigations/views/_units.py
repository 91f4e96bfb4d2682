"""Names and units for the comparison's metric rows: "Host memory used 252 GB", not "mem_used 2.52e+11".

The comparison engine (`playbooks.compare`) names its rows by metric (`gpu_temp_max`) and reads each from
one or more signals (`metric_signals`); the signal catalogue (`playbooks.profiles.signal_info`) gives the
title and unit. Counters are compared as rates summed over the job's hosts, so their unit is per second.
"""

from __future__ import annotations

import math
from typing import Any

from playbooks.compare import metric_signals
from playbooks.profiles import ProfileError, signal_info

# Rows that read a signal with another statistic than its median say which.
_QUALIFIER = {
    "gpu_temp_max": "hottest GPUs",
    "gpu_clock_min": "slowest GPUs",
}
_BYTES = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def metric_meta(name: str) -> dict[str, str]:
    """Return {"label", "unit"} of a comparison metric row; an unknown one keeps its name, no unit."""
    signals = metric_signals(name)
    try:
        info = signal_info(signals[0]) if signals else None
    except ProfileError:
        info = None
    if info is None:
        return {"label": name.replace("_", " "), "unit": ""}
    label = info["title"]
    if name in _QUALIFIER:
        label = f"{label} ({_QUALIFIER[name]})"
    unit = info["unit"]
    if info["kind"] == "counter":
        unit = f"{unit}/s" if unit else "/s"
        label = f"{label}, all hosts"
    return {"label": label, "unit": unit}


def _significant(value: float, digits: int = 3) -> str:
    """Return `value` to `digits` significant digits, without exponent, thousands separated."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{round(value, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_value(value: Any, unit: str) -> str:
    """Return a figure with its unit, at sensible precision: bytes in kB..PB, others to 3 significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    if not math.isfinite(value):
        return str(value)
    if unit in ("bytes", "bytes/s"):
        per = "/s" if unit.endswith("/s") else ""
        for size, name in _BYTES:
            if abs(value) >= size:
                return f"{_significant(value / size)} {name}{per}"
        return f"{_significant(value)} B{per}"
    text = _significant(value)
    return f"{text} {unit}" if unit else text
