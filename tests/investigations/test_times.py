"""`investigations.times`: one parser for typed times (form and `diagnose`), one formatter for pages."""

from __future__ import annotations

import math

import pytest

from investigations.times import parse_time, relative, utc


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1763647500", 1763647500.0),
        (" 1763647500.5 ", 1763647500.5),
        ("2025-11-20T14:05:00Z", 1763647500.0),
        ("2025-11-20T14:05:00", 1763647500.0),  # naive: UTC
        ("2025-11-20T16:05:00+02:00", 1763647500.0),
    ],
)
def test_it_reads_unix_seconds_and_iso_8601(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["yesterday", "", "2025-13-01T00:00:00Z"])
def test_it_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="neither unix seconds nor ISO 8601"):
        parse_time(text)


def test_utc_writes_the_zone_and_nothing_for_no_time() -> None:
    assert utc(1763647500) == "2025-11-20 14:05:00 UTC"
    assert utc("1763647500") == "2025-11-20 14:05:00 UTC"
    for missing in (None, math.nan, math.inf, "soon"):
        assert utc(missing) == ""


@pytest.mark.parametrize(
    ("seconds", "crash", "text"),
    [
        (1000.0, 1000.2, "at the crash"),
        (1000.0 - 725, 1000.0, "12 min 05 s before the crash"),
        (1000.0 + 42, 1000.0, "42 s after the crash"),
        (1000.0 - 3 * 3600 - 7 * 60, 1000.0, "3 h 07 min before the crash"),
        (None, 1000.0, ""),
        (1000.0, None, ""),
    ],
)
def test_relative_says_where_a_time_lies_from_the_crash(seconds, crash, text) -> None:
    assert relative(seconds, crash) == text
