"""tasks/shell.py: every outcome of a claimed row's work is recorded on the row, once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from investigations.models import TaskStatus
from investigations.services import DataSourceError, SourceBusy
from investigations.services.runs import TriagePending
from investigations.tasks import shell
from playbooks.prometheus import PrometheusQueryError, PrometheusUnreachable


class Retried(Exception):
    pass


class FakeTask:
    """What the shell reads of a bound Celery task: its retry count, its limit, and retry()."""

    def __init__(self, retries: int = 0, max_retries: int = 3) -> None:
        self.request = SimpleNamespace(retries=retries)
        self.max_retries = max_retries
        self.retried: dict = {}

    def retry(self, **kw):
        self.retried = kw
        return Retried()


class Cancelled(Exception):
    pass


def _row(log: list, *, claimed: bool = True, **kw) -> shell.Row:
    return shell.Row(
        name="row 1",
        claim=lambda: claimed,
        requeue=lambda reason: log.append(("requeue", reason)),
        finish=lambda status, error: log.append(("finish", status, error)),
        cancelled=(Cancelled,),
        prune=False,
        **kw,
    )


def _raise(exc: BaseException):
    def work():
        raise exc

    return work


def test_done_is_recorded_and_the_result_returned() -> None:
    log: list = []
    assert shell.run_claimed(FakeTask(), _row(log), lambda: 42) == 42
    assert log == [("finish", TaskStatus.DONE, None)]


def test_a_row_not_claimed_is_left_alone() -> None:
    log: list = []
    assert shell.run_claimed(FakeTask(), _row(log, claimed=False), lambda: pytest.fail("worked")) is None
    assert log == []


def test_a_busy_machine_makes_the_row_wait_its_turn_well_past_the_transient_retries() -> None:
    """Every served TSDB copy in use: the row waits (requeued, tried again every BUSY_WAIT_S) long after
    a transient error would have given up, then fails saying the machine stayed busy."""
    busy = SourceBusy("Busy: 4 copies of job TSDBs serving on this machine; try again in a moment.")
    log: list = []
    task = FakeTask(retries=10, max_retries=3)
    with pytest.raises(Retried):
        shell.run_claimed(task, _row(log), _raise(busy))
    assert log == [("requeue", f"Waiting for a free TSDB copy: {busy}")]
    assert task.retried["countdown"] == shell.BUSY_WAIT_S
    assert task.retried["max_retries"] == shell.BUSY_WAIT_RETRIES > 10
    log.clear()
    task = FakeTask(retries=shell.BUSY_WAIT_RETRIES)
    assert shell.run_claimed(task, _row(log), _raise(busy)) is None
    assert log[0][:2] == ("finish", TaskStatus.FAILED) and "stayed busy" in log[0][2]


def test_a_transient_error_requeues_with_capped_backoff_then_gives_up() -> None:
    log: list = []
    task = FakeTask(retries=1)
    with pytest.raises(Retried):
        shell.run_claimed(task, _row(log), _raise(PrometheusUnreachable("refused")))
    assert log == [("requeue", "Attempt 2 failed: refused (retrying in 4 s)")]
    assert task.retried["countdown"] == 4
    assert [shell.retry_delay(n) for n in range(8)] == [2, 4, 8, 16, 32, 60, 60, 60]
    log.clear()
    assert shell.run_claimed(FakeTask(retries=3), _row(log), _raise(PrometheusUnreachable("refused"))) is None
    assert log == [("finish", TaskStatus.FAILED, "Gave up after 4 attempts: refused")]


def test_a_pending_triage_waits_then_fails() -> None:
    log: list = []
    task = FakeTask()
    with pytest.raises(Retried):
        shell.run_claimed(task, _row(log), _raise(TriagePending("Waiting for the log triage of job 7")))
    assert log == [("requeue", "Waiting for the log triage of job 7")]
    assert (task.retried["countdown"], task.retried["max_retries"]) == (
        shell.TRIAGE_WAIT_S,
        shell.TRIAGE_WAIT_RETRIES,
    )
    log.clear()
    shell.run_claimed(FakeTask(retries=shell.TRIAGE_WAIT_RETRIES), _row(log), _raise(TriagePending("x")))
    assert log[0][:2] == ("finish", TaskStatus.FAILED) and "did not finish within" in log[0][2]


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (DataSourceError("no prometheus/ folder"), "no prometheus/ folder"),
        (
            PrometheusQueryError("bad_data", "parse error", "up{"),
            "Prometheus rejected the query (bad_data): parse error",
        ),
        (KeyError("own"), "'own'"),  # one of the row's own permanent errors
    ],
)
def test_a_permanent_error_fails_the_row_with_its_message(exc: BaseException, error: str) -> None:
    log: list = []
    assert shell.run_claimed(FakeTask(), _row(log, permanent=(KeyError,)), _raise(exc)) is None
    assert log == [("finish", TaskStatus.FAILED, error)]


def test_a_cancel_leaves_the_row_as_the_cancel_wrote_it() -> None:
    log: list = []
    assert shell.run_claimed(FakeTask(), _row(log), _raise(Cancelled("stopped between queries"))) is None
    assert log == []


def test_the_soft_time_limit_and_a_bug_fail_the_row() -> None:
    log: list = []
    shell.run_claimed(FakeTask(), _row(log), _raise(SoftTimeLimitExceeded()))
    assert log == [("finish", TaskStatus.FAILED, shell.timed_out())]
    log.clear()
    with pytest.raises(ZeroDivisionError):  # re-raised, so Celery logs the traceback
        shell.run_claimed(FakeTask(), _row(log, doing="while planning"), lambda: 1 / 0)
    assert log == [
        ("finish", TaskStatus.FAILED, "Internal error while planning; the worker log has the details")
    ]


def test_a_row_the_service_finishes_is_not_finished_again() -> None:
    log: list = []
    assert shell.run_claimed(FakeTask(), _row(log, finish_done=False), lambda: "run") == "run"
    assert log == []
