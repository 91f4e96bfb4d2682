"""The one shape of every task that works on a row: claim -> work -> outcome.

`run_claimed(task, row, work)`:

1. claims the row (a conditional UPDATE from queued to running): a task delivered twice, or a row that
   was cancelled while its task waited, does nothing;
2. stops what nobody uses any more (idle served TSDB copies, idle tunnels) before it queries a source;
3. runs `work()`, a single service call, and records the outcome on the row:
   - done (when the row says so: `finish_done`), or left to the service that finished it;
   - a transient error (Prometheus unreachable or timing out): back to the queue and a retry after a
     capped exponential backoff (2, 4, 8 ... 60 s), failed with "Gave up after N attempts" once the
     task's retries are spent;
   - waiting for a log triage (`TriagePending`): back to the queue, looked at again every
     TRIAGE_WAIT_S, failed once TRIAGE_WAIT_RETRIES are spent;
   - the machine serves its cap of TSDB copies, all in use (`SourceBusy`): back to the queue, tried
     again every BUSY_WAIT_S for up to BUSY_WAIT_RETRIES times (a copy frees up once it has been idle for
     STEPWISE_TSDB_BUSY_SECONDS, so a burst of runs, such as the demo's start, waits its turn instead of
     giving up after the short transient backoff);
   - cancelled by a user meanwhile: logged, the row left as the cancel wrote it;
   - a permanent error (bad data, no source, a refused URL): failed with the error's message;
   - the soft time limit: failed with "Timed out after N s";
   - anything else is a bug: failed with "Internal error ...", and re-raised so Celery logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from investigations import services
from investigations.models import TaskStatus
from investigations.services.runs import TriagePending
from playbooks.prometheus import PrometheusError

from ._housekeeping import prune_idle

logger = logging.getLogger(__name__)

RETRY_BACKOFF_CAP_S = 60
#: A run that finds a job's log triage still running looks again every TRIAGE_WAIT_S, at most this many
#: times (a stalled triage is not waited for: see `Job.triage_stalled`).
TRIAGE_WAIT_S = 2
TRIAGE_WAIT_RETRIES = 300
#: A run that finds every served TSDB copy of this machine in use waits its turn: BUSY_WAIT_S between
#: tries, at most BUSY_WAIT_RETRIES tries (15 min), then fails saying the machine stayed busy.
BUSY_WAIT_S = 10
BUSY_WAIT_RETRIES = 90

#: Errors that retrying cannot fix, whatever the row: the message is for the user.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (services.DataSourceError, PrometheusError)


def retry_delay(retries: int) -> int:
    """Return the wait before retry number `retries` + 1: 2, 4, 8, … seconds, capped."""
    return min(2 ** (retries + 1), RETRY_BACKOFF_CAP_S)


def timed_out() -> str:
    return f"Timed out after {settings.CELERY_TASK_SOFT_TIME_LIMIT} s"


@dataclass(frozen=True)
class Row:
    """How the shell drives one kind of row.

    Attributes:
        name: what the log calls it ("diagnosis 12", "playbook gpu_health of diagnosis 12").
        claim: moves the row from queued to running; False when another worker has it or it was cancelled.
        requeue(reason): puts the running row back in the queue before a retry.
        finish(status, error): records the outcome while the row still runs (error None: leave it).
        permanent: errors beyond PERMANENT_ERRORS that fail the row with their message.
        cancelled: errors that mean a user cancelled the row meanwhile (it is left as it is).
        finish_done: whether the shell marks the row done after `work()` (False: the service did).
        doing: words for the internal-error message ("while planning").
        prune: stop idle served copies and tunnels first (the work queries a data source).
    """

    name: str
    claim: Callable[[], bool]
    requeue: Callable[[str], Any]
    finish: Callable[[str, str | None], Any]
    permanent: tuple[type[BaseException], ...] = ()
    cancelled: tuple[type[BaseException], ...] = ()
    finish_done: bool = True
    doing: str = ""
    prune: bool = True


def run_claimed[T](task: Task, row: Row, work: Callable[[], T]) -> T | None:
    """Claim the row, run `work()` and record its outcome; return what `work()` returned, or None when the
    row was not claimed or did not finish its work (failed, cancelled, waiting, retrying: Celery's Retry
    is raised for the last two)."""
    if not row.claim():
        logger.info("%s is not queued: another worker got there first, or it was cancelled", row.name)
        return None
    if row.prune:
        prune_idle()
    try:
        result = work()
    except TriagePending as exc:
        _wait_for_triage(task, row, exc)
    except row.cancelled as exc:
        logger.info("%s was cancelled: %s", row.name, exc)
    except services.SourceBusy as exc:
        _wait_for_copy(task, row, exc)
    except services.TRANSIENT_ERRORS as exc:
        _retry_transient(task, row, exc)
    except PERMANENT_ERRORS + row.permanent as exc:
        row.finish(TaskStatus.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        row.finish(TaskStatus.FAILED, timed_out())
    except Exception:
        # A bug, not a data problem: say so on the row, and let Celery log the traceback.
        doing = f" {row.doing}" if row.doing else ""
        row.finish(TaskStatus.FAILED, f"Internal error{doing}; the worker log has the details")
        raise
    else:
        if row.finish_done:
            row.finish(TaskStatus.DONE, None)
        return result
    return None


def _retry_transient(task: Task, row: Row, exc: Exception) -> None:
    """Requeue the row and retry with capped backoff after a transient error; fail it once retries run out."""
    attempt = task.request.retries + 1
    if task.request.retries >= task.max_retries:
        row.finish(TaskStatus.FAILED, f"Gave up after {attempt} attempts: {exc}")
        return
    delay = retry_delay(task.request.retries)
    row.requeue(f"Attempt {attempt} failed: {exc} (retrying in {delay} s)")
    raise task.retry(exc=exc, countdown=delay) from exc


def _wait_for_copy(task: Task, row: Row, exc: services.SourceBusy) -> None:
    """Requeue the row until a served TSDB copy frees up, every BUSY_WAIT_S; fail it once that is exhausted."""
    if task.request.retries >= BUSY_WAIT_RETRIES:
        row.finish(
            TaskStatus.FAILED,
            f"This machine stayed busy for {BUSY_WAIT_S * BUSY_WAIT_RETRIES // 60} min: {exc} "
            "Run it again, or raise STEPWISE_TSDB_MAX_COPIES.",
        )
        return
    row.requeue(f"Waiting for a free TSDB copy: {exc}")
    raise task.retry(exc=exc, countdown=BUSY_WAIT_S, max_retries=BUSY_WAIT_RETRIES) from exc


def _wait_for_triage(task: Task, row: Row, exc: TriagePending) -> None:
    """Requeue the row, saying why, and look again in TRIAGE_WAIT_S; fail it once that is exhausted."""
    if task.request.retries >= TRIAGE_WAIT_RETRIES:
        row.finish(
            TaskStatus.FAILED,
            f"The log triage did not finish within {TRIAGE_WAIT_S * TRIAGE_WAIT_RETRIES} s; "
            "run it again once it has.",
        )
        return
    row.requeue(str(exc))
    raise task.retry(exc=exc, countdown=TRIAGE_WAIT_S, max_retries=TRIAGE_WAIT_RETRIES) from exc
