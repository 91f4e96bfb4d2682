"""The per-source query budget: at most N queries at a time across threads and processes, the others
queue in line and learn that they waited; a dead holder frees its slot; a client's queries go through it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from playbooks.budget import BudgetTimeout, SourceBudget
from playbooks.prometheus import PrometheusClient, PrometheusError, PrometheusTimeout

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
sys.path.insert(0, {repo!r})
from playbooks.budget import SourceBudget
with SourceBudget({root!r}, "http://head-node:9090", {slots}).slot():
    print("held", flush=True)
    sys.stdin.readline()
"""


def _wait_until(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def _holder(root: Path, slots: int = 1) -> subprocess.Popen:
    """Start another process that holds one slot of the source until it reads a line (or dies)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=str(REPO), root=str(root), slots=slots)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_threads_never_exceed_the_slots_and_the_extra_ones_queue(tmp_path) -> None:
    """Six threads, two slots: never more than two inside at once, every thread gets in, some waited."""
    budget = SourceBudget(tmp_path, "http://head-node:9090", 2)
    inside, peak, waits = 0, 0, []
    lock = threading.Lock()
    gate = threading.Barrier(6)

    def work() -> None:
        nonlocal inside, peak
        gate.wait()
        with budget.slot() as waited:
            with lock:
                inside += 1
                peak = max(peak, inside)
                waits.append(waited)
            time.sleep(0.05)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2
    assert len(waits) == 6
    assert sum(1 for w in waits if w > 0) >= 4  # only two found a free slot


def test_another_process_holding_the_only_slot_makes_a_query_queue(tmp_path) -> None:
    """The budget is shared across processes: this one waits in the queue until the other releases."""
    holder = _holder(tmp_path)
    budget = SourceBudget(tmp_path, "http://head-node:9090", 1)
    got: list[float] = []
    released = threading.Event()

    def take() -> None:
        with budget.slot() as waited:
            got.append(waited if released.is_set() else -1.0)

    t = threading.Thread(target=take)
    t.start()
    _wait_until(budget.queued, "the query lines up in the queue")
    assert not got  # still waiting: the other process holds the slot
    released.set()
    holder.stdin.write("go\n")
    holder.stdin.flush()
    t.join(timeout=30)
    holder.wait(timeout=30)
    assert len(got) == 1 and got[0] > 0  # it got the slot only after the release, and knows it waited
    assert not budget.queued()


def test_a_killed_holder_frees_its_slot(tmp_path) -> None:
    """A worker that dies holding a slot (SIGKILL) does not leak it: the kernel drops its lock."""
    holder = _holder(tmp_path)
    holder.kill()
    holder.wait(timeout=30)
    with SourceBudget(tmp_path, "http://head-node:9090", 1, max_wait=30).slot() as waited:
        assert waited == 0.0


def test_a_query_queued_past_the_limit_fails_as_a_timeout(tmp_path) -> None:
    """Every slot stays taken longer than max_wait: BudgetTimeout, and the client reports a PrometheusTimeout."""
    holder = _holder(tmp_path)
    try:
        budget = SourceBudget(tmp_path, "http://head-node:9090", 1, max_wait=0.2)
        with pytest.raises(BudgetTimeout, match="already runs 1 queries"), budget.slot():
            pass
        with PrometheusClient("http://head-node:9090", gate=budget.slot) as client:
            with pytest.raises(PrometheusTimeout, match="queued too long"):
                client.query("up")
    finally:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(timeout=30)


def test_different_sources_have_separate_budgets(tmp_path) -> None:
    """A slot held on one head node does not hold back queries to another."""
    holder = _holder(tmp_path)
    try:
        with SourceBudget(tmp_path, "http://other-node:9090", 1, max_wait=5).slot() as waited:
            assert waited == 0.0
    finally:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(timeout=30)


def test_status_reads_do_not_take_a_slot(tmp_path) -> None:
    """Only queries go through the gate: /-/ready and status reads never queue behind them."""
    calls: list[str] = []

    class Gate:
        def __enter__(self) -> float:
            calls.append("slot")
            return 0.0

        def __exit__(self, *exc) -> None:
            return None

    with PrometheusClient("http://127.0.0.1:9", gate=Gate, retries=1, timeout=1) as client:
        client.ready()
        with pytest.raises(PrometheusError):  # nothing listens: the query fails, after taking its slot
            client.query("up")
    assert calls == ["slot"]


@pytest.mark.parametrize("slots", [2, 1])
def test_a_clients_parallel_calls_never_exceed_its_sources_slots(tmp_path, slots) -> None:
    """run_parallel asked for 4 at a time on a source of 2 slots runs 2 at a time: a caller alone never
    queues behind its own queries (a budget of one slot runs them one by one, never queued)."""
    budget = SourceBudget(tmp_path, "http://head-node:9090", slots)
    running, peak, waits, lock = [0], [0], [], threading.Lock()

    def call() -> None:
        with budget.slot() as waited:
            waits.append(waited)
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= 1

    with PrometheusClient("http://127.0.0.1:9", gate=budget.slot) as client:
        client.run_parallel([call] * 8, max_concurrency=4)
    assert peak[0] == slots
    assert waits == [0.0] * 8  # none queued for a slot
