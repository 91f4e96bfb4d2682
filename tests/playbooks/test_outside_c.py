"""What the third outside corpus (bench/outside/gen_c.py, #10, written blind) exposed, each on a small job of
that generator served by a real Prometheus and diagnosed end to end.

- One burst of correctable ECC errors on one GPU of a healthy job made it a gpu-hardware-fault (and beat a
  real thermal straggler): corrected errors are no fault by themselves, only corroboration of an
  uncorrectable error, a fatal Xid or a host that then went silent, where they still date a node death.
- On an AMD device-metrics-exporter host one GPU's series vanished (fallen off the bus) minutes before the
  host went silent; the death was dated at the silence: a drop in the host's count of reporting GPUs within
  a bounded lookback before it is the onset.
- A restore comparison was refused when the trainer exports no step gauge, although both logs carry timed
  steps: the log's step timeline aligns the two runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.outside._c_plan import Spec, plan_cases
from bench.outside.gen_c import build_pair, build_single
from playbooks.compare import CompareJob, compare_jobs
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outside-c")


def _spec(cls: str, variant: str, herrings: list[str], seed: int = 5, hosts: int = 16, **layout) -> Spec:
    """The seed's first case of that class and variant, made small (16 hosts x 4 GPUs, 1 h at 30 s)."""
    spec = next(s for s in plan_cases(seed) if s.cls == cls and s.variant == variant)
    lay = dataclasses.replace(spec.layout, **layout)
    model = spec.gpu_model if (lay.gpu == "dcgm") == spec.gpu_model.startswith("NVIDIA") else "MI300X"
    if lay.gpu == "dcgm" and not model.startswith("NVIDIA"):
        model = "NVIDIA H100 80GB HBM3"
    return dataclasses.replace(
        spec, hosts=spec.hosts[:hosts], ips=spec.ips[:hosts], gpus=4, interval=30.0, hours=1.0,
        herrings=herrings, layout=lay, slurm=not lay.kube, gpu_model=model,
    )  # fmt: skip


def _diagnose(served_job, root: Path, spec: Spec) -> tuple[dict, dict]:
    d = root / spec.name
    truth = build_single(spec, d)
    return run_diagnosis(served_job.dir(d), triage=triage_job(d).to_dict()), truth


def _alarms(result: dict) -> list[str]:
    return [f["title"] for f in result["findings"] if f["severity"] in ("warning", "critical")]


def test_one_correctable_ecc_burst_on_a_healthy_job_is_a_note(served_job, root):
    spec = _spec("healthy", "plain", ["ce_burst"], gpu="dcgm", dcgm_ecc="sbe-dbe", host_label="Hostname")
    result, truth = _diagnose(served_job, root, spec)
    assert truth["class"] == "healthy"
    notes = [f for f in result["findings"] if f["title"].startswith("Correctable ECC")]
    assert notes and all(f["severity"] == "info" for f in notes), "the burst is seen, as a note"
    assert result["diagnosis"]["class"] == "healthy"
    assert not _alarms(result)


def _node_death(served_job, root: Path, spec: Spec) -> tuple[dict, dict, dict]:
    """Diagnose the node death (1.5 h at 20 s) and check its class and dead host."""
    result, truth = _diagnose(served_job, root, dataclasses.replace(spec, interval=20.0, hours=1.5))
    diag = result["diagnosis"]
    assert diag["class"] == "node-death"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    return result, truth, diag


def test_correctable_errors_climbing_before_a_node_dies_still_date_the_death(served_job, root):
    spec = _spec("node-death", "slurm", [], gpu="dcgm", dcgm_ecc="sbe-dbe", host_label="Hostname", kube=False)
    result, truth, diag = _node_death(served_job, root, spec)
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3, "the errors before the silence"


def test_a_gpu_that_falls_off_the_bus_before_its_host_goes_silent_dates_the_death(served_job, root):
    spec = _spec("node-death", "xid79", [], gpu="amd-dme", host_label="hostname")
    result, truth, diag = _node_death(served_job, root, spec)
    # the AMD exporter drops the fallen GPU's series minutes before the host stops reporting
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 1.5, "dated when the GPU vanished"
    silent = next(f for f in result["findings"] if f["title"].startswith("Host "))
    assert any("series vanished" in e["interpretation"] for e in silent["evidence"])


def test_a_restore_pair_without_a_step_gauge_is_aligned_by_the_logs(served_job, root):
    spec = _spec("restore-resource-leak", "pair", [], gpu="dcgm", training_gauges=False)
    d = root / spec.name
    truth = build_pair(spec, d)
    jobs = [CompareJob(served_job.dir(d / r), triage_job(d / r).to_dict()) for r in ("a", "b")]
    result = compare_jobs(jobs)
    assert result["diagnosis"]["class"] == truth["class"] == "restore-resource-leak"
    procs = next(m for m in result["comparison"]["metrics"] if m["name"] == "procs_running")
    assert procs["delta_pct"] > 10
