"""A job run by plain sbatch/srun (no wrapper writing NODE_EXIT lines and a JOB SUMMARY): the log ends with
srun's and slurmstepd's own report of how the tasks ended. Each reads as the seed table's class, the host
taken from the line, instead of an `unknown-death`."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.triage import triage_log
from tests.playbooks.test_triage_events import HEAD, STEPS

CANCEL = "slurmstepd: error: *** STEP 81234.0 ON gpu-101 CANCELLED AT 2026-03-01T10:20:00 ***"


@pytest.mark.parametrize(
    ("ending", "status", "klass", "host"),
    [
        (["srun: error: gpu-103: task 2: Exited with exit code 1"], "failed", "node-fail", "gpu-103"),
        (["srun: error: gpu-102: task 0-7: Killed"], "failed", "node-fail", "gpu-102"),
        (["srun: error: gpu-104: tasks 3: Exited with exit code 137"], "failed", "node-fail", "gpu-104"),
        (["srun: error: gpu-104: task 3: Exited with exit code 139"], "failed", "node-fail", "gpu-104"),
        (
            ["srun: error: gpu-101: task 0: Segmentation fault (core dumped)"],
            "failed",
            "node-fail",
            "gpu-101",
        ),
        (
            # one task crashes; srun aborts the step and kills the others: the crash is the suspect
            [
                "srun: error: gpu-103: task 2: Exited with exit code 1",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                CANCEL,
                "srun: error: gpu-101: tasks 0-1: Killed",
                "srun: error: gpu-104: task 3: Exited with exit code 143",
            ],
            "failed",
            "node-fail",
            "gpu-103",
        ),
        (
            # scancel: SIGTERM to every task, a SIGKILL to those that outlive it
            [
                CANCEL,
                "srun: Terminating StepId=81234.0",
                *[f"srun: error: gpu-10{r + 1}: task {r}: Exited with exit code 143" for r in range(3)],
                "srun: error: gpu-104: task 3: Killed",
            ],
            "cancelled",
            "cancelled",
            None,
        ),
        (
            [CANCEL.replace("STEP 81234.0", "JOB 81234").replace(" ***", " DUE TO TIME LIMIT ***")],
            "cancelled",
            "cancelled",
            None,
        ),
        (
            [f"srun: error: gpu-10{r + 1}: task {r}: Exited with exit code 143" for r in range(4)],
            "cancelled",
            "cancelled",
            None,
        ),
        (
            [f"srun: error: gpu-10{r + 1}: task {r}: Terminated" for r in range(4)],
            "cancelled",
            "cancelled",
            None,
        ),
    ],
    ids=[
        "exit-1",
        "killed",
        "exit-137",
        "exit-139",
        "segfault",
        "crash-then-abort",
        "scancel",
        "time-limit",
        "all-143",
        "all-terminated",
    ],
)
def test_srun_and_slurmstepd_endings_read_as_their_class(ending, status, klass, host) -> None:
    t = triage_log(HEAD + STEPS + ending)
    assert (t.status, t.triage_class) == (status, klass)
    assert "oom-host" not in t.classes, "srun's `Killed` is a SIGKILL, no OOM by itself"
    if host is None:
        assert "node-fail" not in t.classes and "node_exits" not in t.details
        return
    assert t.details["node_exits"][0]["host"] == host
    assert t.matches[0].text == ending[0]
    ended = [e for e in t.details["host_events"] if e["kind"] in ("killed", "exited")]
    assert ended[0]["host"] == host and ended[0]["line"] == len(HEAD) + len(STEPS) + 1


def test_a_crash_after_the_last_step_is_a_soft_success() -> None:
    """Every step ran (steps=100, step 99 logged), then a task exited 1 at teardown."""
    steps = [STEPS[0].replace("step: 0,", f"step: {i},") for i in range(100)]
    t = triage_log(HEAD + steps + ["srun: error: gpu-103: task 2: Exited with exit code 1"])
    assert t.last_step == 99 and t.status == "soft-success"


def _plain_sbatch(job_dir: Path, to: Path) -> Path:
    """Return a copy of the job's log without what the seed system's wrapper writes (NODE_EXIT, stage banners,
    the JOB SUMMARY): the log of a job srun ran by itself."""
    log = job_dir / "job.log" if (job_dir / "job.log").exists() else job_dir.with_suffix(".log")
    lines = log.resolve().read_text(encoding="utf-8").splitlines()
    cut = next((i for i, ln in enumerate(lines) if "JOB SUMMARY" in ln), len(lines))
    kept = [ln for ln in lines[:cut] if "NODE_EXIT" not in ln and "== Training" not in ln]
    out = to / "job.log"
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize("scenario", ["host-oom", "gpu-hardware-fault"])
def test_a_generated_crash_without_the_wrappers_summary_is_failed_on_its_host(
    job_factory, tmp_path, scenario
):
    """The generator's crash endings without the wrapper end with srun's `task N: Exited with exit code
    137|134` of the culprit's host: the job failed there (it was an unknown death)."""
    job_dir, truth = job_factory(scenario, 1, "nvidia", nodes=4)
    t = triage_log(_plain_sbatch(job_dir, tmp_path))
    assert t.status == "failed" and "node-fail" in t.classes and "unknown-death" not in t.classes
    culprit = truth["culprits"][0]["host"]
    assert [e["host"] for e in t.details["node_exits"]] == [culprit]
