"""SSH-tunnel data sources through the services, against a real sshd forwarding to a real Prometheus."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from investigations import services
from investigations.models import DataSource, Investigation, InvestigationJob, Job, QueryRun, TaskStatus
from investigations.services import diagnosis
from investigations.services import investigations as inv_svc
from investigations.services import tunnels as tunnel_services
from investigations.services.discovery import discovery_execute
from investigations.tasks import diagnosis as diagnosis_tasks
from investigations.tasks import tunnel_check_task, tunnel_open_task, tunnels_prune_task
from playbooks import tsdb_server
from playbooks import tunnel as tunnels
from playbooks.triage import triage_job
from tests.support.sshd import SSHServer, sshd_fixture  # noqa: F401 (registers the `sshd` fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def tunnels_dir(settings, tmp_path: Path):
    """A private tunnel work root; every tunnel left in it is closed after the test."""
    root = tmp_path / "tunnels"
    settings.STEPWISE_TUNNELS_DIR = root
    settings.STEPWISE_TUNNEL_TIMEOUT = 15
    yield root
    tunnels.reap_leftover_tunnels(root)


@pytest.fixture(scope="session")
def prom_port(served_job) -> int:
    """The loopback port of the healthy job's read-only Prometheus (the tunnel's remote port)."""
    client, _truth, _job_dir = served_job("healthy")
    return int(urlsplit(client.base_url).port or 0)


@pytest.fixture
def job(db) -> Job:
    return Job.objects.create(job_id="81234", name="JAX-llama2-70b")


@pytest.fixture
def source(job: Job, sshd: SSHServer, prom_port: int) -> DataSource:
    """The job's SSH-tunnel source through the test sshd to the healthy job's Prometheus."""
    return tunnel_services.tunnel_datasource_create(job, sshd.spec(prom_port))


def _ssh_pid(ds: DataSource) -> int:
    pid = _ssh_pid_or_none(ds)
    assert pid is not None
    return pid


def _ssh_pid_or_none(ds: DataSource) -> int | None:
    found = tunnels.find_tunnel(tunnel_services.tunnel_spec(ds), django_settings.STEPWISE_TUNNELS_DIR)
    return None if found is None else found.pid


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _investigation(
    job: Job, status: str = Investigation.Status.OPEN, title: str = "slow steps"
) -> Investigation:
    inv = Investigation.objects.create(title=title, status=status)
    InvestigationJob.objects.create(investigation=inv, job=job)
    return inv


# -- creating ---------------------------------------------------------------------------------------


def test_it_creates_the_source_from_the_tunnel_in_the_job_log(job_factory) -> None:
    """With no spec given, the tunnel the job's triage found is used; nothing is opened yet."""
    job_dir, truth = job_factory("healthy")
    triage = triage_job(job_dir).to_dict()
    job = Job.objects.create(job_id=str(truth.get("job_id") or "1"), triage=triage)
    ds = tunnel_services.tunnel_datasource_create(job)
    assert ds.kind == DataSource.Kind.SSH_TUNNEL and ds.state == DataSource.State.UNKNOWN
    assert ds.tunnel["host"] == truth["head"] and ds.tunnel["user"] == "root"
    assert ds.tunnel["remote_port"] == triage["prometheus"]["port"]
    assert ds.tunnel["jump"] == ["alice@login01.example.org"]
    assert ds.address == ""


def test_it_creates_the_source_from_pasted_text_and_refuses_injection(job: Job) -> None:
    """A pasted command is parsed; an option-injection attempt is refused and nothing is saved."""
    ds = tunnel_services.tunnel_datasource_create(job, "ssh -p 2222 -L 9191:localhost:9191 root@gpu-101")
    assert (ds.tunnel["host"], ds.tunnel["ssh_port"], ds.tunnel["remote_port"]) == ("gpu-101", 2222, 9191)
    DataSource.objects.all().delete()
    with pytest.raises(services.DataSourceError, match="ProxyCommand"):
        tunnel_services.tunnel_datasource_create(job, "ssh -oProxyCommand=sh -L 9191:localhost:9191 root@h")
    with pytest.raises(services.DataSourceError, match="Host"):
        tunnel_services.tunnel_datasource_create(
            job, {"user": "root", "host": "-oProxyCommand=sh", "remote_port": 1}
        )
    assert not DataSource.objects.exists()


def test_a_job_without_log_or_tunnel_gets_a_clear_message(job: Job) -> None:
    """No spec and no log: the user is told to paste the command."""
    with pytest.raises(services.DataSourceError, match="paste the tunnel command"):
        tunnel_services.tunnel_datasource_create(job)


# -- opening, querying, checking --------------------------------------------------------------------


def test_datasource_client_opens_the_tunnel_and_queries_through_it(source: DataSource, served_job) -> None:
    """The existing client path opens the tunnel: the source goes up with the local URL as address."""
    direct, truth, _ = served_job("healthy")
    with services.datasource_client(source) as client:
        start, end = direct.data_time_range()
        steps = client.query_range("tb_step", start, end, step=60)
    assert steps and max(steps[0].values) == truth["last_step"]
    source.refresh_from_db()
    assert source.state == DataSource.State.UP
    assert source.address.startswith("http://127.0.0.1:") and source.served_url == source.address
    assert source.last_checked is not None


def test_a_query_run_on_a_tunnel_source_stores_results(source: DataSource, served_job) -> None:
    """Sample queries run through the tunnel as through any source."""
    _direct, truth, _ = served_job("healthy")
    run = services.queryrun_create(source, services.SAMPLE_QUERIES)
    QueryRun.objects.filter(pk=run.pk).update(status=QueryRun.Status.RUNNING)
    run = services.queryrun_execute(run.pk)
    results = {r.name: r for r in run.results.all()}
    assert all(r.ok for r in results.values()), {n: r.error for n, r in results.items()}
    assert results["training-step"].summary["max"] == truth["last_step"]


def test_states_through_check_kill_and_reopen(source: DataSource) -> None:
    """unknown -> up (open) -> up (check) -> down (ssh killed) -> up again through datasource_client."""
    assert tunnel_services.tunnel_check(source).state == DataSource.State.DOWN  # not open yet
    assert "not open" in source.state_detail

    opened = tunnel_services.tunnel_open(source)
    source.refresh_from_db()
    assert source.state == DataSource.State.UP and source.address == opened.url
    checked_at = source.last_checked
    assert tunnel_services.tunnel_check(source).state == DataSource.State.UP
    assert source.last_checked >= checked_at

    os.kill(opened.pid, signal.SIGKILL)
    assert _gone(opened.pid)
    tunnel_services.tunnel_check(source)
    assert source.state == DataSource.State.DOWN and source.address == ""

    with services.datasource_client(source) as client:
        assert client.ready()
    source.refresh_from_db()
    assert source.state == DataSource.State.UP and _ssh_pid(source) != opened.pid
    assert services.datasource_check(source).state == DataSource.State.UP


def test_a_refused_login_is_an_error_state_with_the_reason(job: Job, sshd: SSHServer, prom_port: int) -> None:
    """A key the server refuses: the source is in error and says "Permission denied"."""
    ds = tunnel_services.tunnel_datasource_create(
        job, sshd.spec(prom_port, identity_file=str(sshd.wrong_key))
    )
    with pytest.raises(services.DataSourceError, match="Permission denied"):
        tunnel_services.tunnel_open(ds)
    ds.refresh_from_db()
    assert ds.state == DataSource.State.ERROR and "refused the SSH login" in ds.state_detail
    # The query path reports the same, so a query run fails with the reason instead of hanging.
    assert services.datasource_check(ds).state == DataSource.State.ERROR


def test_nothing_listening_on_the_remote_port_is_an_error_state(job: Job, sshd: SSHServer) -> None:
    """A forward to a port where nothing listens: error, naming the port."""
    dead = tsdb_server.find_free_port(24000, 24999)
    ds = tunnel_services.tunnel_datasource_create(job, sshd.spec(dead))
    with pytest.raises(services.DataSourceError):
        tunnel_services.tunnel_open(ds)
    ds.refresh_from_db()
    assert ds.state == DataSource.State.ERROR and f"localhost:{dead}" in ds.state_detail


def test_changing_the_spec_closes_the_old_tunnel(
    source: DataSource, job: Job, sshd: SSHServer, prom_port
) -> None:
    """One tunnel source per job: a new spec replaces the old one and closes its ssh."""
    old = tunnel_services.tunnel_open(source)
    again = tunnel_services.tunnel_datasource_create(job, sshd.spec(prom_port, host="localhost"))
    assert again.pk == source.pk and again.tunnel["host"] == "localhost"
    assert again.state == DataSource.State.UNKNOWN and again.address == ""
    assert _gone(old.pid)


# -- closing when no longer needed ------------------------------------------------------------------


def test_resolving_the_investigation_releases_the_tunnel(source: DataSource, job: Job) -> None:
    """Resolved: its job's tunnel is closed, unless another open investigation still uses the job."""
    inv = _investigation(job)
    other = _investigation(job, title="second look")
    pid = tunnel_services.tunnel_open(source).pid

    inv.status = Investigation.Status.RESOLVED
    inv.save()
    assert tunnel_services.tunnels_release(inv) == []  # `other` is still open
    assert not _gone(pid, within=0.2)

    assert tunnel_services.tunnels_release(other, deleting=True) == [pid]
    assert _gone(pid)
    source.refresh_from_db()
    assert source.state == DataSource.State.DOWN and "no open investigation" in source.state_detail


def test_a_tunnel_two_jobs_share_stays_open_while_either_investigation_is(
    source: DataSource, job: Job, sshd: SSHServer, prom_port: int
) -> None:
    """One ssh per spec: resolving the investigation of one job keeps it for the other job's open one."""
    twin = Job.objects.create(job_id="", name="same live job, opened again without a job id")
    twin_source = tunnel_services.tunnel_datasource_create(twin, sshd.spec(prom_port))
    first, second = _investigation(job), _investigation(twin, title="second look")
    pid = tunnel_services.tunnel_open(source).pid
    assert tunnel_services.tunnel_open(twin_source).pid == pid  # shared

    Investigation.objects.filter(pk=first.pk).update(status=Investigation.Status.RESOLVED)
    first.refresh_from_db()
    assert tunnel_services.tunnels_release(first) == []
    assert tunnels_prune_task() == []
    assert not _gone(pid, within=0.2)

    Investigation.objects.filter(pk=second.pk).update(status=Investigation.Status.RESOLVED)
    assert tunnels_prune_task() == [pid]
    assert _gone(pid)


def test_an_open_investigation_releases_nothing(source: DataSource, job: Job) -> None:
    """Releasing an open investigation that is not being deleted keeps its tunnel."""
    inv = _investigation(job)
    pid = tunnel_services.tunnel_open(source).pid
    assert tunnel_services.tunnels_release(inv) == []
    assert not _gone(pid, within=0.2)


def test_resolving_mid_diagnosis_cancels_it_so_no_playbook_reopens_the_tunnel(
    source: DataSource, job: Job, served_job, monkeypatch
) -> None:
    """The playbooks a diagnosis still has queued when its investigation is resolved would each reopen the
    tunnel that resolving just closed (`datasource_client` reopens a tunnel that is down), one ssh after
    another until a prune closed it again. Resolving cancels the runs on the tunnels it closes instead."""
    _client, _truth, job_dir = served_job("healthy")
    Job.objects.filter(pk=job.pk).update(triage=triage_job(job_dir).to_dict() | {"state": "done"})
    queued: list[tuple] = []
    for task in (diagnosis_tasks.playbook_execute_task, diagnosis_tasks.diagnosis_decide_task):
        monkeypatch.setattr(task, "delay", lambda *args, _task=task: queued.append((_task, args)))
    inv = _investigation(job)
    run = diagnosis.diagnosis_start(inv, Job.objects.get(pk=job.pk))
    diagnosis_tasks.diagnosis_plan_task(run.pk)  # opens the tunnel; one playbook task queued per playbook
    assert queued
    pid = _ssh_pid(source)

    inv_svc.investigation_update(inv, status=Investigation.Status.RESOLVED)
    assert _gone(pid)
    while queued:  # the worker then takes the playbooks it had been given before the resolve
        task, args = queued.pop(0)
        task(*args)
    assert _ssh_pid_or_none(source) is None, "a playbook of the resolved investigation reopened its tunnel"
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED and "SSH tunnel was closed" in run.error


def test_a_planning_task_caught_by_the_resolve_does_not_reopen_the_tunnel(
    source: DataSource, job: Job, served_job
) -> None:
    """A worker had claimed the diagnosis's planning and was about to connect when the investigation was
    resolved: resolving cancelled the run and closed the tunnel, and the planning that goes on must not
    start a new ssh nobody needs (a clean-clone CI once found the tunnel's entry back after the resolve)."""
    _client, _truth, job_dir = served_job("healthy")
    Job.objects.filter(pk=job.pk).update(triage=triage_job(job_dir).to_dict() | {"state": "done"})
    inv = _investigation(job)
    run = diagnosis.diagnosis_start(inv, Job.objects.get(pk=job.pk))
    pid = tunnel_services.tunnel_open(source).pid
    type(run).objects.filter(pk=run.pk).update(status=TaskStatus.RUNNING)  # claimed by a worker

    inv_svc.investigation_update(inv, status=Investigation.Status.RESOLVED)
    assert _gone(pid)
    with pytest.raises(services.DataSourceError, match="no longer running"):
        diagnosis.diagnosis_plan(run.pk)
    assert _ssh_pid_or_none(source) is None, "the cancelled run's planning reopened the tunnel"
    assert not any(Path(django_settings.STEPWISE_TUNNELS_DIR).glob("*/tunnel.json"))
    source.refresh_from_db()
    assert source.state == DataSource.State.DOWN and "no open investigation needs it" in source.state_detail


def test_prune_closes_the_tunnels_of_resolved_investigations(source: DataSource, job: Job) -> None:
    """The periodic prune closes a tunnel whose investigations are all resolved, and keeps the rest."""
    pid = tunnel_services.tunnel_open(source).pid
    assert tunnels_prune_task() == []  # job in no investigation: left to the idle timeout
    inv = _investigation(job)
    assert tunnels_prune_task() == []
    Investigation.objects.filter(pk=inv.pk).update(status=Investigation.Status.RESOLVED)
    assert tunnels_prune_task() == [pid]
    source.refresh_from_db()
    assert _gone(pid) and source.state == DataSource.State.DOWN


def test_prune_closes_idle_tunnels_and_marks_them_down(source: DataSource, settings) -> None:
    """A tunnel unused for STEPWISE_TUNNEL_IDLE_SECONDS is closed; its source is marked down."""
    pid = tunnel_services.tunnel_open(source).pid
    settings.STEPWISE_TUNNEL_IDLE_SECONDS = 3600
    assert tunnel_services.tunnels_prune() == []
    settings.STEPWISE_TUNNEL_IDLE_SECONDS = 0
    assert tunnel_services.tunnels_prune() == [pid]
    source.refresh_from_db()
    assert _gone(pid) and source.state == DataSource.State.DOWN


def test_tasks_open_and_check_by_id(source: DataSource) -> None:
    """The open task brings the source up; the check task refreshes it; unknown ids are ignored."""
    tunnel_open_task(source.pk)
    source.refresh_from_db()
    assert source.state == DataSource.State.UP
    os.kill(_ssh_pid(source), signal.SIGKILL)
    time.sleep(0.2)
    tunnel_check_task(source.pk)
    source.refresh_from_db()
    assert source.state == DataSource.State.DOWN
    tunnel_open_task(10**9)
    tunnel_check_task(10**9)


def test_close_marks_down_and_frees_the_port(source: DataSource) -> None:
    """tunnel_close stops our ssh and clears the address."""
    opened = tunnel_services.tunnel_open(source)
    assert tunnel_services.tunnel_close(source) is True
    assert _gone(opened.pid)
    source.refresh_from_db()
    assert source.state == DataSource.State.DOWN and source.address == ""
    assert tunnel_services.tunnel_close(source) is False


def test_prune_marks_a_source_left_starting_by_a_dead_worker_down(source: DataSource) -> None:
    """A source stuck in "starting" long past the open timeout is checked and marked down."""
    DataSource.objects.filter(pk=source.pk).update(
        state=DataSource.State.STARTING, last_checked=timezone.now() - timedelta(hours=1)
    )
    assert tunnel_services.tunnels_prune() == []
    source.refresh_from_db()
    assert source.state == DataSource.State.DOWN and "not open" in source.state_detail


def test_discovery_through_a_tunnel_says_so(source: DataSource) -> None:
    """The source's state after discovery names the tunnel, not a read-only copy it never served."""
    ds = discovery_execute(source.pk)
    assert ds.state == DataSource.State.UP
    assert ds.state_detail.startswith("discovered: amd profile")
    assert f"through the SSH tunnel at {ds.served_url}" in ds.state_detail
    assert "read-only copy" not in ds.state_detail


def _create_on_tunnel(spec) -> Investigation:
    """Return a new investigation on the tunnel (issue 13: the tunnel opens first, or nothing is saved)."""
    return inv_svc.investigation_create(
        title="tunnel",
        source=inv_svc.SourceRequest(kind="tunnel", tunnel=spec, job_id="81234", cluster="east"),
    )


def test_a_tunnel_that_opens_gives_an_investigation_whose_tunnel_is_already_open(
    sshd: SSHServer, prom_port: int, tunnels_dir: Path
) -> None:
    investigation = _create_on_tunnel(sshd.spec(prom_port))
    ds = inv_svc.investigation_primary_job(investigation).current_datasource()
    assert ds is not None and ds.kind == DataSource.Kind.SSH_TUNNEL
    opened = tunnels.find_tunnel(tunnel_services.tunnel_spec(ds), tunnels_dir)
    assert opened is not None and tunnels.tunnel_problem(opened) is None
    # The worker's open reuses it: the same ssh.
    assert tunnel_services.tunnel_open(ds).pid == opened.pid


def test_a_tunnel_that_cannot_open_is_refused_with_its_reason_and_nothing_is_saved(
    sshd: SSHServer, tunnels_dir: Path
) -> None:
    dead = tsdb_server.find_free_port(24000, 24999)
    with pytest.raises(
        inv_svc.InvestigationError, match="The SSH tunnel did not open: .*nothing accepts"
    ) as caught:
        _create_on_tunnel(sshd.spec(dead))
    assert caught.value.field == "tunnel"
    assert not Investigation.objects.exists() and not InvestigationJob.objects.exists()
    assert not Job.objects.exists() and not DataSource.objects.exists()
    assert tunnels.list_tunnels(tunnels_dir) == []
