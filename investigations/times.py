"""Times as people type and read them: unix seconds or ISO 8601 in, "YYYY-MM-DD HH:MM:SS UTC" out.

One parser for the diagnosis form and `manage.py diagnose`; one formatter for every page.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any


def parse_time(text: str) -> float:
    """Return unix seconds from unix seconds or ISO 8601 (UTC unless it carries an offset).

    Raises ValueError for anything else.
    """
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither unix seconds nor ISO 8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def utc(seconds: Any) -> str:
    """Return unix seconds as "YYYY-MM-DD HH:MM:SS UTC", or "" for None, NaN or garbage."""
    try:
        return dt.datetime.fromtimestamp(float(seconds), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def relative(seconds: float | None, crash: float | None) -> str:
    """Return where `seconds` lies relative to the crash: "12 min 05 s before the crash", or ""."""
    if seconds is None or crash is None:
        return ""
    delta = seconds - crash
    if abs(delta) < 0.5:
        return "at the crash"
    whole = int(round(abs(delta)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        text = f"{hours} h {minutes:02d} min"
    elif minutes:
        text = f"{minutes} min {secs:02d} s"
    else:
        text = f"{secs} s"
    return f"{text} {'before' if delta < 0 else 'after'} the crash"


def finite_seconds(value: Any) -> float | None:
    """Return `value` as float seconds, or None when it is missing, not a number, NaN or infinite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
