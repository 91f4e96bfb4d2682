"""Outside corpus D (#10): a tiny seed builds valid cases (a TSDB promtool reads, a truth per case, a log)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.outside import gen_d
from bench.outside._d_fleet import make_hosts
from bench.outside._d_om import write_openmetrics
from bench.outside._d_sim import Series

CLASSES = ("network-hang", "restore-resource-leak", "host-oom")
KEYS = {"class", "family", "culprits", "onset", "scrape_s", "story"}

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def _series_count(tsdb: Path) -> int:
    out = subprocess.run(
        ["promtool", "tsdb", "list", str(tsdb)], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert rows, f"no block in {tsdb}"
    return sum(int(r[4]) for r in rows)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gen_d")
    for index, cls in enumerate(CLASSES):
        gen_d.one((3, index, cls, str(root), True))
    return root


def test_every_case_has_a_truth_a_log_and_a_tsdb_promtool_reads(corpus: Path) -> None:
    cases = sorted(p.parent for p in corpus.rglob("truth.json"))
    assert [c.name for c in cases] == [f"{i:02d}-{c}" for i, c in enumerate(CLASSES)]
    for case in cases:
        truth = json.loads((case / "truth.json").read_text())
        assert set(truth) == KEYS and truth["class"] in CLASSES
        jobs = [case / "a", case / "b"] if truth["class"] == "restore-resource-leak" else [case]
        for job in jobs:
            assert "completed step:" in (job / "job.log").read_text()
            assert _series_count(job / "prometheus") > 100


def test_truth_names_culprits_and_onset_inside_the_data(corpus: Path) -> None:
    truth = json.loads((corpus / "00-network-hang" / "truth.json").read_text())
    assert 1 <= len(truth["culprits"]) <= 2 and truth["onset"] is not None
    log = (corpus / "00-network-hang" / "job.log").read_text()
    assert all(c["host"] in log for c in truth["culprits"])
    oom = json.loads((corpus / "02-host-oom" / "truth.json").read_text())
    oom_log = (corpus / "02-host-oom" / "job.log").read_text()
    assert len(oom["culprits"]) == 1
    assert "exit code 137" in oom_log or "exitcode: -9" in oom_log


def test_the_same_seed_builds_the_same_case(tmp_path: Path, corpus: Path) -> None:
    gen_d.one((3, 0, "network-hang", str(tmp_path), True))
    again = tmp_path / "00-network-hang"
    assert (again / "truth.json").read_text() == (corpus / "00-network-hang" / "truth.json").read_text()
    assert (again / "job.log").read_text() == (corpus / "00-network-hang" / "job.log").read_text()


def _series(host: str, times: list[float]) -> Series:
    labels = {"instance": f"{host}:9100", "job": "nodes"}
    return Series("up", labels, np.ones(len(times)), np.array(times, dtype=float))


def test_two_hosts_never_share_an_address() -> None:
    # seed 12 drew one node IP for two of its 64 hosts: promtool saw their samples as one series going back
    for seed in range(40):
        hosts = make_hosts(random.Random(seed), 64, 2)
        for attr in ("name", "ip", "pod_ip"):
            assert len({getattr(h, attr) for h in hosts}) == 64, (seed, attr)


def test_the_writer_refuses_a_series_twice_or_back_in_time(tmp_path: Path) -> None:
    twice = [_series("10.2.3.117", [10.0, 20.0]), _series("10.2.3.117", [5.0, 15.0])]
    with pytest.raises(ValueError, match="10.2.3.117"):
        write_openmetrics(twice, tmp_path / "twice.om")
    with pytest.raises(ValueError, match="back in time"):
        write_openmetrics([_series("10.2.3.118", [10.0, 5.0])], tmp_path / "back.om")
    assert write_openmetrics([_series("10.2.3.118", [5.0, float("nan"), 10.0])], tmp_path / "ok.om") == 2
