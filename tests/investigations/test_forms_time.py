"""`forms.TimeField` and `DiagnosisStartForm`: a typed time cleans to float seconds, empty to None."""

from __future__ import annotations

import pytest
from django import forms

from investigations.forms import DiagnosisStartForm, TimeField


@pytest.mark.parametrize(
    ("typed", "seconds"),
    [
        ("1763647500", 1763647500.0),
        (" 2025-11-20T16:05:00+02:00 ", 1763647500.0),
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_a_typed_time_cleans_to_unix_seconds_or_none(typed: str | None, seconds: float | None) -> None:
    assert TimeField(required=False).clean(typed) == seconds


def test_a_required_time_left_empty_is_an_error() -> None:
    with pytest.raises(forms.ValidationError, match="required"):
        TimeField().clean("  ")


def test_it_renders_as_a_text_input_with_what_was_typed() -> None:
    form = DiagnosisStartForm(data={"scope": "all", "start": "yesterday", "end": ""})
    assert not form.is_valid()
    html = str(form["start"])
    assert 'type="text"' in html and 'value="yesterday"' in html


def test_the_form_makes_the_window_from_both_times() -> None:
    form = DiagnosisStartForm(data={"scope": "all", "start": "1763647500", "end": "2025-11-20T15:05:00Z"})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["window"] == {"start": 1763647500.0, "end": 1763651100.0}
    assert DiagnosisStartForm(data={"scope": "triage"}).is_valid()
