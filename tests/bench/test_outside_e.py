"""Outside corpus E (#10): a tiny seed builds valid cases (a TSDB promtool reads, a truth per case, a log)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.outside import gen_e
from bench.outside._e_plan import compress
from tests.bench._promtool import blocks, dump

CLASSES = ("network-hang", "restore-resource-leak", "gpu-hardware-fault")
KEYS = {"class", "family", "culprits", "onset", "scrape_s", "story"}
STEP = re.compile(r"iteration +\d+/|'loss': |completed step: |\] step \d+: loss=|steps: \d+ loss: ")

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gen_e")
    for index, cls in enumerate(CLASSES):
        gen_e.one((3, index, cls, str(root), True))
    return root


def test_every_case_has_a_truth_a_log_and_a_tsdb_promtool_reads(corpus: Path) -> None:
    cases = sorted(p.parent for p in corpus.rglob("truth.json") if p.parent.name not in ("a", "b"))
    assert [c.name for c in cases] == [f"{i:02d}-{c}" for i, c in enumerate(CLASSES)]
    for case in cases:
        truth = json.loads((case / "truth.json").read_text())
        assert set(truth) == KEYS and truth["class"] in CLASSES
        jobs = [case / "a", case / "b"] if truth["class"] == "restore-resource-leak" else [case]
        for job in jobs:
            log = (job / "job.log").read_text()
            assert STEP.search(log), f"no step line in {job}/job.log"
            assert sum(int(r[4]) for r in blocks(job / "prometheus")) > 1000


def test_truth_names_culprits_and_onset_inside_the_data(corpus: Path, tmp_path: Path) -> None:
    case = corpus / "00-network-hang"
    truth = json.loads((case / "truth.json").read_text())
    assert 1 <= len(truth["culprits"]) <= 2
    rows = blocks(case / "prometheus")
    lo, hi = min(int(r[1]) for r in rows) / 1000, max(int(r[2]) for r in rows) / 1000
    assert lo < truth["onset"] < hi
    temps = dump(case / "prometheus", "DCGM_FI_DEV_GPU_TEMP", tmp_path)
    for culprit in truth["culprits"]:
        assert f'Hostname="{culprit["host"]}"' in temps
    hw = json.loads((corpus / "02-gpu-hardware-fault" / "truth.json").read_text())
    assert len(hw["culprits"]) == 1 and hw["culprits"][0]["gpu"] is not None
    xid = dump(corpus / "02-gpu-hardware-fault" / "prometheus", "DCGM_FI_DEV_XID_ERRORS", tmp_path)
    host = hw["culprits"][0]["host"]
    bad = [
        line
        for line in xid.splitlines()
        if f'Hostname="{host}"' in line and re.search(r"} (48|63|79) ", line)
    ]
    assert bad and min(int(line.split()[-1]) / 1000 for line in bad) >= hw["onset"] - hw["scrape_s"]


def test_a_restore_pair_differs_by_the_restore(corpus: Path) -> None:
    pair = corpus / "01-restore-resource-leak"
    truth = json.loads((pair / "truth.json").read_text())
    assert truth["culprits"] == [] and truth["onset"] is not None
    fresh, restored = (pair / "a" / "job.log").read_text(), (pair / "b" / "job.log").read_text()
    assert re.search(r"(?i)load|restor|continuing", restored) and not re.search(
        r"(?i)restoring from|loading chec", fresh
    )


def test_the_same_seed_builds_the_same_case(tmp_path: Path, corpus: Path) -> None:
    gen_e.one((3, 0, "network-hang", str(tmp_path), True))
    again = tmp_path / "00-network-hang"
    assert (again / "truth.json").read_text() == (corpus / "00-network-hang" / "truth.json").read_text()
    assert (again / "job.log").read_text() == (corpus / "00-network-hang" / "job.log").read_text()


def test_slurm_node_lists_are_compressed() -> None:
    assert (
        compress(["gpu-001", "gpu-002", "gpu-003", "gpu-016", "gpu-020", "gpu-021"])
        == "gpu-[001-003,016,020-021]"
    )
    assert compress(["node0007"]) == "node0007"
