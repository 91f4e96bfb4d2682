"""Outside corpus G (#10): a small seed builds valid cases (TSDB blocks promtool reads, a truth, a log)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.outside import gen_g
from bench.outside._g_story import FAMILY
from tests.bench._promtool import blocks, dump

KEYS = {"class", "family", "culprits", "onset", "scrape_s", "story"}

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gen_g")
    for index, (cls, variant) in enumerate(gen_g.plan(small=True)):
        gen_g.one((100, index, cls, variant, str(root), True))
    return root


def _truth(case: Path) -> dict:
    return json.loads((case / "truth.json").read_text())


def test_every_case_has_a_truth_a_log_and_blocks_spanning_the_onset(corpus: Path) -> None:
    cases = sorted(p.parent for p in corpus.glob("*/truth.json"))
    assert [c.name for c in cases] == [f"{i:02d}-{c}" for i, (c, _) in enumerate(gen_g.plan(small=True))]
    for case in cases:
        truth = _truth(case)
        assert set(truth) == KEYS and truth["family"] == FAMILY[truth["class"]]
        assert truth["scrape_s"] in (10.0, 20.0, 30.0)
        jobs = [case / "a", case / "b"] if truth["class"] == "restore-resource-leak" else [case]
        for job in jobs:
            assert re.search(r"(?i)step[ =:]|\[batch=|'step': ", (job / "job.log").read_text())
            rows = blocks(job / "prometheus")
            assert sum(int(r[4]) for r in rows) > 10_000
        if truth["onset"] is not None:
            rows = blocks(jobs[-1] / "prometheus")
            assert min(int(r[1]) for r in rows) / 1000 < truth["onset"] < max(int(r[2]) for r in rows) / 1000


def _by_instance(case: Path, match: str, tmp: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in dump(case / "prometheus", match, tmp).splitlines():
        labels, value, _ = line.rsplit(" ", 2)
        inst = re.search(r'instance="([^"]+)"', labels)
        assert inst
        out.setdefault(inst.group(1), []).append(float(value))
    return out


def test_network_hang_culprit_stands_out_in_its_ack_timeouts(corpus: Path, tmp_path: Path) -> None:
    case = corpus / "01-network-hang"
    culprits = {c["host"] for c in _truth(case)["culprits"]}
    assert 1 <= len(culprits) <= 2
    names = {}
    for line in dump(case / "prometheus", "node_uname_info", tmp_path).splitlines():
        names[re.search(r'instance="([^"]+)"', line).group(1)] = re.search(r'nodename="([^"]+)"', line).group(
            1
        )
    series = _by_instance(
        case,
        '{__name__=~"node_infiniband_local_ack_timeout_errors_total|efa_retrans_timeout_events_total"}',
        tmp_path,
    )
    growth = {names[k]: max(v) - min(v) for k, v in series.items()}
    quiet = max(v for k, v in growth.items() if k not in culprits)
    assert all(growth[h] > 20 * max(quiet, 1.0) for h in culprits)


def test_hardware_fault_names_a_gpu_whose_xid_follows_onset(corpus: Path, tmp_path: Path) -> None:
    case = corpus / "02-gpu-hardware-fault"
    truth = _truth(case)
    (c,) = truth["culprits"]
    assert c["gpu"] is not None
    rows = []
    for line in dump(case / "prometheus", "DCGM_FI_DEV_XID_ERRORS", tmp_path).splitlines():
        labels, value, ms = line.rsplit(" ", 2)
        if f'Hostname="{c["host"]}"' in labels and f'gpu="{c["gpu"]}"' in labels and float(value) > 0:
            rows.append(int(ms) / 1000)
    assert rows and truth["onset"] <= min(rows) <= truth["onset"] + 2 * truth["scrape_s"] + 1


def test_restore_pair_b_runs_more_processes_and_says_it_restored(corpus: Path, tmp_path: Path) -> None:
    pair = corpus / "03-restore-resource-leak"
    assert _truth(pair)["culprits"] == []
    assert "Loading checkpoint" in (pair / "b" / "job.log").read_text()
    assert "Loading checkpoint" not in (pair / "a" / "job.log").read_text()

    def mean_running(job: Path) -> float:
        vals = [
            float(x.rsplit(" ", 2)[1])
            for x in dump(job / "prometheus", "node_procs_running", tmp_path).splitlines()
        ]
        return sorted(vals)[len(vals) * 3 // 4]

    assert mean_running(pair / "b") > mean_running(pair / "a") + 8


def test_the_same_seed_builds_the_same_case(tmp_path: Path, corpus: Path) -> None:
    gen_g.one((100, 2, "gpu-hardware-fault", 0, str(tmp_path), True))
    again, first = tmp_path / "02-gpu-hardware-fault", corpus / "02-gpu-hardware-fault"
    assert (again / "truth.json").read_text() == (first / "truth.json").read_text()
    assert (again / "job.log").read_text() == (first / "job.log").read_text()
