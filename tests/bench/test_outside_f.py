"""Outside corpus F (#10): a small seed builds valid cases (TSDB blocks promtool reads, a truth, a log with steps)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.outside import gen_f
from bench.outside._f_log import compress
from bench.outside._f_plan import plan
from tests.bench._promtool import blocks, dump

KEYS = {"class", "family", "culprits", "onset", "scrape_s", "story"}
STEP = re.compile(r"step: +\d+ +loss:|global_step: \d+ \| reduced_train_loss|step=\d+ loss=")

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def _dump(tsdb: Path, match: str, tmp: Path) -> list[tuple[str, float, float]]:
    """(labels, value, unix seconds) of the matching samples, read by promtool from a copy with a wal dir."""
    rows = []
    for line in dump(tsdb, match, tmp).splitlines():
        labels, value, ms = line.rsplit(" ", 2)
        rows.append((labels, float(value), int(ms) / 1000))
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gen_f")
    for index, cls in enumerate(plan(small=True)):
        gen_f.one((3, index, cls, str(root), True))
    return root


def test_every_case_has_a_truth_a_log_with_steps_andblocks(corpus: Path) -> None:
    classes = plan(small=True)
    cases = sorted(p.parent for p in corpus.rglob("truth.json"))
    assert [c.name for c in cases] == [f"{i:02d}-{c}" for i, c in enumerate(classes)]
    for case in cases:
        truth = json.loads((case / "truth.json").read_text())
        assert set(truth) == KEYS and truth["class"] in classes
        jobs = [case / "a", case / "b"] if truth["class"] == "restore-resource-leak" else [case]
        for job in jobs:
            assert STEP.search((job / "job.log").read_text()), f"no step line in {job}/job.log"
            assert sum(int(r[4]) for r in blocks(job / "prometheus")) > 10_000


def test_network_hang_culprits_stand_out_in_their_nic_counters(corpus: Path, tmp_path: Path) -> None:
    case = corpus / "00-network-hang"
    truth = json.loads((case / "truth.json").read_text())
    rows = blocks(case / "prometheus")
    assert min(int(r[1]) for r in rows) / 1000 < truth["onset"] < max(int(r[2]) for r in rows) / 1000
    culprits = {c["host"] for c in truth["culprits"]}
    assert 1 <= len(culprits) <= 2
    series: dict[str, list[float]] = {}
    for labels, value, _ in _dump(case / "prometheus", "infiniband_hw_out_of_sequence", tmp_path):
        series.setdefault(labels, []).append(value)
    per_host: dict[str, float] = {}
    for labels, values in series.items():
        host = re.search(r'\bhost="([^"]+)"', labels)
        assert host
        per_host[host.group(1)] = per_host.get(host.group(1), 0.0) + max(values) - min(values)
    quiet = max(v for h, v in per_host.items() if h not in culprits)
    assert all(per_host[h] > 10 * max(quiet, 1.0) for h in culprits)


def test_gpu_hardware_fault_names_the_gpu_and_its_error_follows_onset(corpus: Path, tmp_path: Path) -> None:
    case = corpus / "02-gpu-hardware-fault"
    truth = json.loads((case / "truth.json").read_text())
    assert len(truth["culprits"]) == 1 and truth["culprits"][0]["gpu"] is not None
    host, gpu = truth["culprits"][0]["host"], truth["culprits"][0]["gpu"]
    bad = [
        t
        for labels, value, t in _dump(case / "prometheus", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", tmp_path)
        if f'ostname="{host}"' in labels and f'gpu="{gpu}"' in labels and value > 0
    ]
    assert bad and min(bad) >= truth["onset"] and min(bad) - truth["onset"] <= 2 * truth["scrape_s"] + 1


def test_a_restore_pair_differs_by_the_restore(corpus: Path) -> None:
    pair = corpus / "01-restore-resource-leak"
    truth = json.loads((pair / "truth.json").read_text())
    assert truth["culprits"] == [] and truth["onset"] is not None
    fresh, restored = (pair / "a" / "job.log").read_text(), (pair / "b" / "job.log").read_text()
    assert re.search(r"(?i)loading the checkpoint|restor", restored)
    assert not re.search(r"(?i)loading the checkpoint|restor", fresh)


def test_the_same_seed_builds_the_same_case(tmp_path: Path, corpus: Path) -> None:
    gen_f.one((3, 0, "network-hang", str(tmp_path), True))
    again, first = tmp_path / "00-network-hang", corpus / "00-network-hang"
    assert (again / "truth.json").read_text() == (first / "truth.json").read_text()
    assert (again / "job.log").read_text() == (first / "job.log").read_text()


def test_slurm_node_lists_are_compressed() -> None:
    assert (
        compress(["gpu-001", "gpu-002", "gpu-003", "gpu-016", "gpu-020", "gpu-021"])
        == "gpu-[001-003,016,020-021]"
    )
    assert compress(["r01n01", "r01n02"]) == "r01n[01-02]"
