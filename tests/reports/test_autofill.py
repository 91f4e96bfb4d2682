"""The report fills itself from a real diagnosis, and people's edits survive the next diagnosis."""

from __future__ import annotations

import copy

import pytest

from playbooks.report import slowdown
from reports.models import Section
from reports.services import autofill, sections

from .conftest import make_case, store_diagnosis

pytestmark = pytest.mark.django_db


def test_a_new_report_has_the_seed_sections_filled_from_the_diagnosis(case, thermal) -> None:
    report = sections.report_for(case)
    keys = list(report.sections.values_list("key", flat=True))
    assert keys == [k for k, _ in autofill.SECTIONS if k != "comparison"]
    d = thermal["result"]["diagnosis"]
    summary = report.sections.get(key="summary").body
    assert d["class"] == "thermal-straggler" and d["class"] in summary and d["summary"][:60] in summary
    evidence = report.sections.get(key="metric_evidence").body
    assert "| Host | GPU | Value | Interpretation |" in evidence and "Query: `" in evidence
    assert report.sections.get(key="log_evidence").body  # triage matches or the honest "no matches"
    assert all(s.version == 1 and not s.edited for s in report.sections.all())


def test_impact_of_a_job_that_trained_on_is_the_throughput_its_slower_steps_lost(case, thermal) -> None:
    """A thermal straggler slows the job without stopping it: the GPU-hours lost are the share of the
    GPU-hours since the onset that the slower steps cost (s / (1 + s) for steps s slower), not all of them."""
    inputs = autofill.gather(case)
    m = autofill.impact(inputs)
    src = thermal["result"]["source"]
    assert m["hosts"] == len(src["hosts"]) and m["gpus_per_host"] == src["gpus_per_host"]
    spent = m["hosts"] * m["gpus_per_host"] * (m["end"] - m["onset"]) / 3600
    assert m["trained_on"] and m["gpu_hours_spent"] == pytest.approx(spent)
    s = slowdown(thermal["result"]["findings"])
    assert s is not None and 0.03 < s < 1.0  # the generator's straggler slows the job by a few to tens of %
    assert m["slowdown"] == s and m["gpu_hours"] == pytest.approx(spent * s / (1 + s))
    body = sections.report_for(case).sections.get(key="impact").body
    assert f"{m['gpu_hours']:,.1f} GPU-hours of throughput lost" in body and f"{s:.0%} slower" in body


def test_impact_of_a_job_that_stopped_is_every_gpu_hour_from_the_onset(db, thermal) -> None:
    """A class whose story stops the job (a hang): every GPU's hour from the onset to the kill is lost."""
    result = copy.deepcopy(thermal["result"])
    result["diagnosis"]["class"] = "collective-hang"
    investigation = make_case(thermal, diagnosed=False)
    store_diagnosis(investigation, investigation.job_links.get().job, result)
    m = autofill.impact(autofill.gather(investigation))
    assert not m["trained_on"] and m["slowdown"] is None
    assert m["gpu_hours"] == pytest.approx(m["hosts"] * m["gpus_per_host"] * (m["end"] - m["onset"]) / 3600)
    body = sections.report_for(investigation).sections.get(key="impact").body
    assert f"{m['gpu_hours']:,.1f} GPU-hours lost" in body and "stopped the job" in body


def test_impact_without_a_measured_slowdown_claims_no_loss(db, thermal) -> None:
    """A job that trained on with no slower steps measured (no step-time finding) lost nothing we can show."""
    result = copy.deepcopy(thermal["result"])
    result["findings"] = [f for f in result["findings"] if slowdown([f]) is None]
    investigation = make_case(thermal, diagnosed=False)
    store_diagnosis(investigation, investigation.job_links.get().job, result)
    m = autofill.impact(autofill.gather(investigation))
    assert m["trained_on"] and m["gpu_hours"] is None and m["gpu_hours_spent"] > 0
    body = sections.report_for(investigation).sections.get(key="impact").body
    assert "none measured" in body and "GPU-hours lost**" not in body


def test_without_a_diagnosis_the_sections_say_so(db, thermal) -> None:
    investigation = make_case(thermal, diagnosed=False)
    report = sections.report_for(investigation)
    assert "No diagnosis yet" in report.sections.get(key="summary").body


def _rediagnose(case, thermal, new_summary: str):
    result = copy.deepcopy(thermal["result"])
    result["diagnosis"]["summary"] = new_summary
    store_diagnosis(case, case.job_links.get().job, result)


def test_a_new_diagnosis_refreshes_untouched_sections(case, thermal) -> None:
    report = sections.report_for(case)
    _rediagnose(case, thermal, "A brand new machine summary.")
    report = sections.report_for(case)
    summary = report.sections.get(key="summary")
    assert (
        "A brand new machine summary." in summary.body
        and summary.version == 2
        and not summary.machine_pending
    )


def test_an_edited_section_is_not_overwritten_and_the_new_text_is_offered(case, thermal, alice) -> None:
    report = sections.report_for(case)
    summary = report.sections.get(key="summary")
    sections.section_save(summary.pk, base_version=1, text="Our own words.", user=alice)
    _rediagnose(case, thermal, "A brand new machine summary.")
    sections.report_for(case)
    summary.refresh_from_db()
    assert summary.body == "Our own words." and summary.edited
    assert "A brand new machine summary." in summary.machine_pending
    taken = sections.section_take_machine(summary.pk, base_version=summary.version, user=alice)
    assert "A brand new machine summary." in taken.body and not taken.machine_pending and not taken.edited
    assert taken.history.first().history_change_reason == "took the machine's new text"


def test_leaving_the_machine_text_keeps_ours_until_the_machine_changes_again(case, thermal, alice) -> None:
    report = sections.report_for(case)
    summary = report.sections.get(key="summary")
    sections.section_save(summary.pk, base_version=1, text="Ours.", user=alice)
    _rediagnose(case, thermal, "Machine v2.")
    sections.report_for(case)
    left = sections.section_leave_machine(summary.pk, user=alice)
    assert left.body == "Ours." and not left.machine_pending
    sections.report_for(case)  # nothing new: no offer again
    assert not Section.objects.get(pk=summary.pk).machine_pending
