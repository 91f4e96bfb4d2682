"""The load test's data set (`bench/load_test.py`): what a team's Stepwise holds after some weeks.

Many investigations on a few real jobs, each with a real diagnosis (run once per job through the
workflow's tasks, in this process, against the job's served TSDB, then copied to the job's other
investigations as a re-run would store it: runs, playbook executions, findings), and a report that
people worked on: sections edited several times (each a revision in the history), verdicts on findings,
comments with replies and mentions, action items, pinned charts and timeline notes.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

#: What each investigation's report holds, as a team leaves it: edits per section, comments, ...
EDITS, COMMENTS, ACTIONS, PINS, NOTES = 3, 8, 3, 2, 3


def _diagnose(investigation: Any, job: Any) -> Any:
    """Run the job's diagnosis through the workflow's tasks, in this process (eagerly), and return it."""
    from investigations.services import diagnosis as dx
    from investigations.tasks.diagnosis import diagnosis_plan_task
    from stepwise.celery import app

    app.conf.task_always_eager = True
    try:
        run = dx.diagnosis_start(investigation, job)
        diagnosis_plan_task.delay(run.pk)
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    if run.status != "done":
        raise RuntimeError(f"the seeding diagnosis of {job.job_id} ended {run.status}: {run.error}")
    return run


def _copy_run(run: Any, investigation: Any) -> None:
    """Store `run` (its executions and findings) again for another investigation of the same job."""
    from investigations.models import Finding, Investigation

    executions = list(run.executions.all())
    findings = list(Finding.objects.filter(run=run))
    run.pk, run.id, run.investigation = None, None, investigation
    run.save()
    for row in executions:
        row.pk, row.id, row.run = None, None, run
    run.executions.model.objects.bulk_create(executions)
    for finding in findings:
        finding.pk, finding.id, finding.run, finding.investigation = None, None, run, investigation
    Finding.objects.bulk_create(findings)
    Investigation.objects.filter(pk=investigation.pk).update(incident_class=run.result["diagnosis"]["class"])


def _work_on_report(investigation: Any, users: list[Any], rnd: random.Random) -> None:
    """Do to the investigation's report what a team does: edit, judge, discuss, assign, pin, note."""
    from investigations.models import PinnedChart, TimelineNote
    from reports.services import conversation, findings, sections

    report = sections.report_for(investigation)
    people = itertools.cycle(rnd.sample(users, 4))
    for section in list(report.sections.all()[:4]):
        text = section.body
        for edit in range(EDITS):
            text += f"\n\n{next(people).username} (edit {edit + 1}): checked the **{section.title}** again."
            sections.section_save(section.pk, base_version=section.version, text=text, user=next(people))
            section.refresh_from_db()
    for i, (finding, _) in enumerate(findings.report_findings(report)[:6]):
        value = "rejected" if i % 3 == 2 else "confirmed"
        findings.verdict_set(report, finding, value=value, reason="noise on that host", user=next(people))
    parent = None
    for i in range(COMMENTS):
        author = next(people)
        body = f"Looked at the {['GPU', 'RDMA', 'host', 'step time'][i % 4]} panels; @{next(people).username} see above."
        comment = conversation.comment_add(report, body=body, user=author, parent_id=parent)
        parent = comment.pk if i % 3 == 0 else None
    for i in range(ACTIONS):
        conversation.action_item_add(report, text=f"Follow-up {i + 1}", owner=next(people), user=next(people))
    job = investigation.jobs.first()
    figure = {"data": [{"x": list(range(50)), "y": [rnd.random() for _ in range(50)]}], "layout": {}}
    for i in range(PINS):
        PinnedChart.objects.create(investigation=investigation, job=job, title=f"pin {i}", figure=figure)
    start = (job.triage or {}).get("crash", {}) or {}
    for i in range(NOTES):
        TimelineNote.objects.create(
            investigation=investigation,
            job=job,
            at=float(start.get("time") or 1.7e9) - 600 * i,
            text=f"note {i}",
        )


def seed(registered: list[tuple[Any, Any]], users: list[Any], count: int) -> list[int]:
    """Create `count` investigations over the registered (job, data source) pairs; return their ids."""
    from investigations.models import DiagnosisRun, Investigation, InvestigationJob

    rnd = random.Random(7)
    t0 = time.perf_counter()
    pks: list[int] = []
    runs: dict[int, int] = {}  # job pk -> the pk of its diagnosis, run once
    for i in range(count):
        job, _ = registered[i % len(registered)]
        inv = Investigation.objects.create(title=f"{job.job_id} incident {i}", owner=users[i % len(users)])
        InvestigationJob.objects.create(investigation=inv, job=job, role=InvestigationJob.Role.PRIMARY)
        if job.pk not in runs:
            runs[job.pk] = _diagnose(inv, job).pk
        else:
            _copy_run(DiagnosisRun.objects.get(pk=runs[job.pk]), inv)
        pks.append(inv.pk)
    print(f"{count} investigations diagnosed in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    for pk in pks:
        _work_on_report(Investigation.objects.get(pk=pk), users, rnd)
    print(
        f"their reports worked on (edits, verdicts, comments, actions, pins, notes) in {time.perf_counter() - t0:.1f} s"
    )
    return pks
