"""The diagnosis glue: starting refuses what cannot run, planning and executing store what the engine gives,
deciding upserts findings by rule and prunes the ones a complete re-run no longer finds."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.utils import timezone

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    TaskStatus,
)
from investigations.services import decision, query_slots, runs
from investigations.services import diagnosis as dx
from investigations.services import diagnosis_overview as overview
from investigations.services import playbook_runs as pbr
from playbooks.gpus import GPU_MODELS
from playbooks.triage import triage_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def diagnosable(served_job):
    """Return make(scenario) -> (investigation, job, truth): the job's data source is the URL of its served TSDB."""

    def make(scenario: str = "thermal-straggler", **kw):
        client, truth, job_dir = served_job(scenario, **kw)
        job = Job.objects.create(
            job_id=f"{scenario}-{Job.objects.count()}", name=scenario, job_dir=str(job_dir)
        )
        job.triage = triage_job(job_dir).to_dict() | {"state": "done"}
        job.save()
        DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=client.base_url)
        investigation = Investigation.objects.create(title=f"{scenario} incident")
        InvestigationJob.objects.create(
            investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY
        )
        return investigation, job, truth

    return make


def _run_through(run: DiagnosisRun, *, failing: tuple[str, ...] = ()) -> DiagnosisRun:
    """Plan, execute every playbook (marking those of `failing` failed) and decide, as the tasks do."""
    assert runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    for playbook in run.playbooks:
        assert pbr.playbook_claim(run.pk, playbook)
        if playbook in failing:
            pbr.playbook_finish(run.pk, playbook, TaskStatus.FAILED, "Gave up after 5 attempts: unreachable")
        else:
            pbr.playbook_execute(run.pk, playbook)
    assert decision.diagnosis_finished_executing(run.pk)
    return decision.diagnosis_decide(run.pk)


# --- Start ---------------------------------------------------------------------------------------


def test_it_creates_a_queued_run_on_the_jobs_data_source(diagnosable, django_user_model) -> None:
    investigation, job, _ = diagnosable()
    user = django_user_model.objects.create_user("bob")
    run = dx.diagnosis_start(investigation, job, user=user, window={"start": 10.0, "end": 20.0})
    assert run.status == TaskStatus.QUEUED
    assert run.datasource == job.datasources.get()
    assert run.window == {"start": 10.0, "end": 20.0}
    assert run.created_by == user


def test_it_refuses_a_job_without_a_data_source(db) -> None:
    job = Job.objects.create(job_id="81234")
    investigation = Investigation.objects.create(title="t")
    InvestigationJob.objects.create(investigation=investigation, job=job)
    with pytest.raises(dx.DiagnosisRunError, match="has no data source"):
        dx.diagnosis_start(investigation, job)
    assert not DiagnosisRun.objects.exists()


def test_it_refuses_a_second_run_while_one_is_active(diagnosable) -> None:
    investigation, job, _ = diagnosable()
    first = dx.diagnosis_start(investigation, job)
    with pytest.raises(dx.DiagnosisRunError, match=f"already queued \\(run #{first.pk}\\)"):
        dx.diagnosis_start(investigation, job)
    other = Investigation.objects.create(title="the same job, seen from another incident")
    InvestigationJob.objects.create(investigation=other, job=job)
    with pytest.raises(dx.DiagnosisRunError, match=f"run #{first.pk} in “{investigation.title}”"):
        dx.diagnosis_start(other, job)
    runs.run_cancel(first)
    assert dx.diagnosis_start(investigation, job).pk != first.pk


def test_it_refuses_a_job_of_another_investigation(diagnosable) -> None:
    _, job, _ = diagnosable()
    other = Investigation.objects.create(title="other")
    with pytest.raises(dx.DiagnosisRunError, match="not part of this investigation"):
        dx.diagnosis_start(other, job)


@pytest.mark.parametrize(
    ("window", "message"),
    [({"start": 20.0, "end": 10.0}, "end must come after"), ({"start": 20.0}, "both the start and the end")],
)
def test_it_refuses_a_bad_window(diagnosable, window, message) -> None:
    investigation, job, _ = diagnosable()
    with pytest.raises(dx.DiagnosisRunError, match=message):
        dx.diagnosis_start(investigation, job, window=window)


# --- Plan and execute ----------------------------------------------------------------------------


def test_planning_waits_for_a_triage_still_running_but_not_for_a_stalled_one(diagnosable) -> None:
    """The triage picks the playbooks: a plan that finds it queued or running waits (nothing is stored)."""
    investigation, job, _ = diagnosable("thermal-straggler")
    done = job.triage
    Job.objects.filter(pk=job.pk).update(
        triage={"state": "running", "started": timezone.now().isoformat()}, triage_status="running"
    )
    run = dx.diagnosis_start(investigation, job)
    assert runs.run_claim(run.pk)
    with pytest.raises(runs.TriagePending, match=f"Waiting for the log triage of job {job.job_id}"):
        dx.diagnosis_plan(run.pk)
    assert not run.executions.exists()
    # a triage whose worker died long ago is not waited for
    Job.objects.filter(pk=job.pk).update(
        triage={"state": "running", "started": (timezone.now() - dt.timedelta(days=1)).isoformat()}
    )
    assert dx.diagnosis_plan(run.pk).playbooks
    Job.objects.filter(pk=job.pk).update(triage=done, triage_status="done")


def test_the_plan_task_requeues_and_retries_while_the_triage_runs(diagnosable, monkeypatch) -> None:
    """The task puts the run back in the queue, saying why, and retries in TRIAGE_WAIT_S."""
    from investigations.tasks import diagnosis as dx_tasks
    from investigations.tasks import shell

    investigation, job, _ = diagnosable("thermal-straggler")
    Job.objects.filter(pk=job.pk).update(
        triage={"state": "queued", "queued": timezone.now().isoformat()}, triage_status="queued"
    )
    run = dx.diagnosis_start(investigation, job)
    asked: dict = {}

    class Retried(Exception):
        pass

    def retry(**kw):
        asked.update(kw)
        return Retried()

    monkeypatch.setattr(dx_tasks.diagnosis_plan_task, "retry", retry)
    with pytest.raises(Retried):
        dx_tasks.diagnosis_plan_task.run(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.QUEUED and run.error.startswith("Waiting for the log triage")
    assert asked["countdown"] == shell.TRIAGE_WAIT_S and asked["max_retries"] == shell.TRIAGE_WAIT_RETRIES


def test_planning_stores_the_source_and_one_queued_execution_per_playbook(diagnosable) -> None:
    investigation, job, truth = diagnosable()
    run = dx.diagnosis_start(investigation, job)
    runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    executions = list(run.executions.all())
    assert run.playbooks and [e.playbook for e in executions] == run.playbooks
    assert all(e.status == TaskStatus.QUEUED for e in executions)
    assert run.progress_total == sum(len(e.queries) for e in executions) > 0
    assert set(truth["hosts"]) <= set(run.planned["source"]["hosts"])
    assert run.stage == DiagnosisRun.Stage.EXECUTING


def test_a_query_several_playbooks_plan_runs_once_and_every_playbook_still_decides(diagnosable) -> None:
    investigation, job, truth = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job, playbooks=dx.ALL_PLAYBOOKS)
    runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    executions = list(run.executions.order_by("pk"))
    owned = [(q["name"], q["promql"]) for e in executions for q in e.queries]
    assert len(owned) == len(set(owned)) == run.progress_total
    shared = {name: owner for e in executions for name, owner in e.output["shared"].items()}
    assert shared, "the playbooks share no query: nothing to check"
    order = [e.playbook for e in executions]
    for e in executions:
        for name, owner in e.output["shared"].items():
            assert order.index(owner) < order.index(e.playbook)
            assert name in [q["name"] for q in run.executions.get(playbook=owner).queries]
    for playbook in run.playbooks:
        pbr.playbook_claim(run.pk, playbook)
        pbr.playbook_execute(run.pk, playbook)
    assert decision.diagnosis_finished_executing(run.pk)
    run = decision.diagnosis_decide(run.pk)
    assert run.result["diagnosis"]["class"] == truth["class"]


def test_executing_a_playbook_stores_its_queries_output_and_progress(diagnosable) -> None:
    investigation, job, _ = diagnosable()
    run = dx.diagnosis_start(investigation, job)
    runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    playbook = run.playbooks[0]
    planned = len(run.executions.get(playbook=playbook).queries)
    assert pbr.playbook_claim(run.pk, playbook)
    pbr.playbook_execute(run.pk, playbook)
    execution = PlaybookExecution.objects.get(run=run, playbook=playbook)
    run.refresh_from_db()
    assert execution.status == TaskStatus.DONE
    assert run.progress_done == planned
    assert len(execution.queries) == planned
    assert {"name", "promql", "kind", "ok", "error", "summary"} <= set(execution.queries[0])
    assert any(q["ok"] for q in execution.queries)
    answered = [q for q in execution.queries if q["ok"]]
    assert all("series" in q["summary"] for q in answered)
    assert execution.output["result"]["name"] == playbook
    assert not pbr.playbook_claim(run.pk, playbook), "a finished playbook cannot be claimed again"


def test_only_one_of_the_last_playbooks_gets_to_decide(diagnosable) -> None:
    investigation, job, _ = diagnosable()
    run = dx.diagnosis_start(investigation, job)
    runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    assert not decision.diagnosis_finished_executing(run.pk), "playbooks are still queued"
    PlaybookExecution.objects.filter(run=run).update(status=TaskStatus.DONE)
    assert decision.diagnosis_finished_executing(run.pk)
    assert not decision.diagnosis_finished_executing(run.pk)
    run.refresh_from_db()
    assert run.stage == DiagnosisRun.Stage.DECIDING


# --- Decide --------------------------------------------------------------------------------------


def test_a_whole_diagnosis_persists_findings_and_the_contract_object(diagnosable) -> None:
    investigation, job, truth = diagnosable("thermal-straggler")
    run = _run_through(dx.diagnosis_start(investigation, job))
    assert run.status == TaskStatus.DONE and run.finished is not None
    assert set(run.result) == {"job", "source", "diagnosis", "findings", "timings", "timeline", "gpu_model"}
    assert run.result["gpu_model"] == {"name": truth["gpu_model"], "set_by_user": False}
    assert all("rule" not in f for f in run.result["findings"])
    assert run.result["timings"]["queries"] > 0
    findings = Finding.objects.filter(investigation=investigation, job=job)
    assert findings.count() == len(run.result["findings"]) > 0
    culprit = truth["culprits"][0]["host"]
    assert any(culprit in f.hosts for f in findings)
    assert all(f.evidence and f.run == run for f in findings)
    investigation.refresh_from_db()
    assert investigation.incident_class == run.result["diagnosis"]["class"]


def test_the_user_names_the_gpu_model_and_the_profile(diagnosable) -> None:
    """A GPU model chosen by the user (any case) is what the priors use; unknown names are refused."""
    investigation, job, truth = diagnosable("healthy")
    other = next(name for name in GPU_MODELS if name != truth["gpu_model"])
    run = _run_through(dx.diagnosis_start(investigation, job, profile="amd", gpu_model=other.lower()))
    assert run.status == TaskStatus.DONE
    assert run.result["gpu_model"] == {"name": other, "set_by_user": True}
    assert run.result["source"]["profile"] == "amd"
    with pytest.raises(dx.DiagnosisRunError, match="Unknown GPU model 'V100'"):
        dx.diagnosis_start(investigation, job, gpu_model="V100")
    with pytest.raises(dx.DiagnosisRunError, match="Unknown metric profile 'intel'"):
        dx.diagnosis_start(investigation, job, profile="intel")


def test_a_rerun_replaces_findings_instead_of_adding_them(diagnosable) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    _run_through(dx.diagnosis_start(investigation, job))
    before = dict(Finding.objects.values_list("pk", "rule"))
    second = _run_through(dx.diagnosis_start(investigation, job))
    after = dict(Finding.objects.values_list("pk", "rule"))
    assert after == before
    assert set(Finding.objects.values_list("run", flat=True)) == {second.pk}


def test_a_complete_rerun_deletes_findings_whose_rule_no_longer_fires(diagnosable) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    first = _run_through(dx.diagnosis_start(investigation, job))
    playbook = first.playbooks[0]
    stale = Finding.objects.create(
        investigation=investigation,
        job=job,
        run=first,
        playbook=playbook,
        rule="gone",
        incident_class="x",
        title="old",
    )
    by_hand = Finding.objects.create(
        investigation=investigation,
        job=job,
        playbook=playbook,
        rule="noted",
        incident_class="x",
        title="a person's",
    )
    _run_through(dx.diagnosis_start(investigation, job))
    assert not Finding.objects.filter(pk=stale.pk).exists()
    assert Finding.objects.filter(pk=by_hand.pk).exists()


def test_an_incomplete_rerun_keeps_findings_it_could_not_check(diagnosable) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    first = _run_through(dx.diagnosis_start(investigation, job))
    playbook = first.playbooks[-1]
    stale = Finding.objects.create(
        investigation=investigation,
        job=job,
        run=first,
        playbook=playbook,
        rule="gone",
        incident_class="x",
        title="old",
    )
    second = _run_through(dx.diagnosis_start(investigation, job), failing=(playbook,))
    assert Finding.objects.filter(pk=stale.pk).exists()
    assert second.status == TaskStatus.DONE
    assert second.error.startswith(f"1 of {len(second.playbooks)} playbooks failed: {playbook}: Gave up")


def test_cancelling_cancels_the_queued_playbooks_and_keeps_the_finished_ones(diagnosable) -> None:
    investigation, job, _ = diagnosable()
    run = dx.diagnosis_start(investigation, job)
    runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    first = run.playbooks[0]
    pbr.playbook_claim(run.pk, first)
    pbr.playbook_execute(run.pk, first)
    assert runs.run_cancel(run)
    assert not runs.run_cancel(run), "a finished run cannot be cancelled again"
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED and run.finished is not None
    statuses = dict(run.executions.values_list("playbook", "status"))
    assert statuses.pop(first) == TaskStatus.DONE
    assert set(statuses.values()) <= {TaskStatus.CANCELLED}
    assert run.executions.get(playbook=first).output["result"]["results"]


def test_the_overview_lists_findings_by_onset_with_unknown_onsets_last_and_notes_after_the_story(
    diagnosable,
) -> None:
    """Critical and warning findings by onset (the earliest anomaly on top), then info notes by onset."""
    investigation, job, _ = diagnosable()
    for rule, onset, severity in (
        ("c", None, "critical"),
        ("b", 200.0, "warning"),
        ("a", 100.0, "critical"),
        ("red-herring", 50.0, "info"),
        ("missing-families", None, "info"),
    ):
        Finding.objects.create(
            investigation=investigation,
            job=job,
            playbook="p",
            rule=rule,
            incident_class="x",
            title=rule,
            onset=onset,
            severity=severity,
        )
    shown = overview.diagnosis_overview(investigation, job)
    assert [f.rule for f in shown["findings"]] == ["a", "b", "c", "red-herring", "missing-families"]
    assert shown["run"] is None and shown["diagnosis"] is None


# --- Query slots ---------------------------------------------------------------------------------


def test_query_slots_let_a_query_wait_until_one_is_free(tmp_path) -> None:
    slots = query_slots.QuerySlots("datasource-1", 2, tmp_path)
    entered = threading.Event()

    def third() -> None:
        with slots.hold():
            entered.set()

    with slots.hold() as a:
        with slots.hold() as b:
            assert {a, b} == {0, 1}
            waiter = threading.Thread(target=third)
            waiter.start()
            assert not entered.wait(0.3), "a third query ran while both slots were held"
        assert entered.wait(10), "the query did not start once a slot was free"
    waiter.join()


def test_query_slots_bound_the_queries_in_flight(tmp_path) -> None:
    slots = query_slots.QuerySlots("datasource-2", 3, tmp_path)
    lock = threading.Lock()
    in_flight, peak, done = [0], [0], []

    def query(i: int) -> None:
        with slots.hold():
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            time.sleep(0.01)
            with lock:
                in_flight[0] -= 1
        done.append(i)

    workers = [threading.Thread(target=query, args=(i,)) for i in range(12)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(done) == list(range(12))
    assert 1 <= peak[0] <= 3


def test_a_claim_left_by_a_dead_worker_is_taken_again_after_the_hard_time_limit(
    diagnosable, settings
) -> None:
    """acks_late delivers the task of a worker that died again: its running row must not stay stuck."""
    investigation, job, _ = diagnosable()
    run = dx.diagnosis_start(investigation, job)
    assert runs.run_claim(run.pk)
    assert not runs.run_claim(run.pk), "a live claim is not taken twice"
    long_ago = timezone.now() - dt.timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 1)
    DiagnosisRun.objects.filter(pk=run.pk).update(started=long_ago)
    assert runs.run_claim(run.pk)
    run = dx.diagnosis_plan(run.pk)
    playbook = run.playbooks[0]
    assert pbr.playbook_claim(run.pk, playbook)
    assert not pbr.playbook_claim(run.pk, playbook)
    PlaybookExecution.objects.filter(run=run, playbook=playbook).update(updated=long_ago)
    assert pbr.playbook_claim(run.pk, playbook)
    DiagnosisRun.objects.filter(pk=run.pk).update(started=long_ago)
    assert not runs.run_claim(run.pk), "a planned run is not planned again"
