"""What the diagnosis asks Prometheus for (#10, #14): no query whose answer nothing would use."""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace

import numpy as np
import pytest

from playbooks._diagnose_bits import LABEL, OFFSET
from playbooks._diagnose_execute import _to_result
from playbooks.anomaly import Grid
from playbooks.diagnose import SourceInfo, discover_source, execute, plan, render_query, run_diagnosis
from playbooks.loader import DEFINITIONS, PlaybookError, _query, load_playbooks, parse_playbook
from playbooks.profiles import PROFILES
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_scenarios import _serve

HOSTS = tuple(f"h{i:02d}" for i in range(16))


def _source(profile: str = "amd") -> SourceInfo:
    names = tuple(sorted({m for s in PROFILES[profile].signals.values() for m in s.metrics}))
    return SourceInfo("http://127.0.0.1:9", profile, names, HOSTS, 8, (0.0, 7200.0))


def _xid(host: str, code: int) -> dict:
    return {"kind": "xid", "host": host, "time": 3600.0, "line": 9, "code": code, "text": "Xid"}


def _queries(triage: dict) -> dict[str, str]:
    return {q.name: q.promql for p in plan(_source(), triage=triage) for q in p.queries}


def test_the_pci_bus_map_is_read_only_for_the_hosts_the_log_reports_a_hardware_xid_on():
    """The PCI-bus map places a log's Xid on its GPU: without a hardware Xid in the log (none, or the
    program's own Xid 13) it is not asked for; with one, only that host's series are read (by its full
    name where the log gives a short one)."""
    assert "gpu_pci" not in _queries({"details": {"host_events": []}})
    assert "gpu_pci" not in _queries({"details": {"host_events": [_xid("h03", 13)]}})
    promql = _queries(
        {"details": {"host_events": [_xid("h03", 79), _xid("h11.cluster.example", 48), _xid("h03", 79)]}}
    )["gpu_pci"]
    assert 'hw_gpu_power_watts{host=~"h03|h11"}' in promql


def test_a_query_names_only_a_known_log_event():
    with pytest.raises(PlaybookError, match="log_hosts"):
        _query({"name": "x", "signal": "gpu_power", "log_hosts": "oom"}, "f.toml")


def test_the_bits_of_a_host_read_back_as_its_gpus_rows():
    """GPU 0 at or above the threshold then below, GPU 2 below then gone, GPU 1 never reporting; a GPU with
    another index label keeps its own series."""
    word = lambda busy, seen: sum(2 ** (OFFSET + i) for i in seen) + sum(2**i for i in busy)  # noqa: E731
    series = [
        {"labels": {"host": "a", LABEL: "70"}, "values": [word({0}, {0, 2}), word(set(), {0}), None]},
        {"labels": {"host": "a", "gpu": "GPU-7f"}, "values": [12.0, None, 95.0]},
    ]
    g = Grid.from_result({"start": 0.0, "step": 60.0, "n": 3, "series": series})
    rows = {lab["gpu"]: v.tolist() for lab, v in zip(g.labels, g.values, strict=True)}
    assert set(rows) == {"0", "2", "GPU-7f"} and all(lab["host"] == "a" for lab in g.labels)
    assert rows["0"][:2] == [70.0, 0.0] and np.isnan(rows["0"][2])
    assert rows["2"][0] == 0.0 and np.isnan(rows["2"][1:]).all()
    assert rows["GPU-7f"][0] == 12.0 and rows["GPU-7f"][2] == 95.0


def test_a_rule_reads_gpu_bits_only_at_their_own_threshold():
    """The busy-wait rule asks for GPUs at 60 % while its query only says which reach 70 %: refused."""
    text = (DEFINITIONS / "hang.toml").read_text()
    assert "util_min = 70.0" in text
    with pytest.raises(PlaybookError, match="util_min 60.0 differs from query 'util_gpu'"):
        parse_playbook(tomllib.loads(text.replace("util_min = 70.0", "util_min = 60.0")))


@pytest.mark.parametrize("profile", ["nvidia", "amd"])
def test_which_gpus_spin_comes_back_per_host_and_the_verdict_is_the_one_every_gpu_gave(
    served_job, view_root, monkeypatch, profile
):
    """A hang before the first step, one host spinning other GPU indices, judged as 8,192 GPUs would be: the
    per-GPU utilisation query returns one series per host (DCGM's `Hostname`, and the seed's `instance`), and
    the diagnosis (class, culprits, onset, findings) is the one reading every GPU's utilisation gave."""
    client, truth, job_dir = _serve(served_job, view_root, "collective-hang", 3, profile)
    monkeypatch.setattr("playbooks._diagnose_query.PEERS_MIN_POINTS", 0)
    triage = triage_job(job_dir).to_dict()
    source = discover_source(client)
    (hang,) = plan(source, triage=triage, playbooks=["hang"])
    series = execute(client, hang).results["util_gpu"]["series"]
    assert len(series) == len(source.hosts) and all(LABEL in s["labels"] for s in series)
    bits = run_diagnosis(client, triage=triage)
    every = {
        name: replace(pb, queries=tuple(replace(q, at_least=None) for q in pb.queries))
        for name, pb in load_playbooks().items()
    }
    monkeypatch.setattr("playbooks.diagnose.load_playbooks", lambda: every)
    plain = run_diagnosis(client, triage=triage)
    assert bits["diagnosis"]["class"] == "collective-hang" and truth["culprits"]
    assert bits["diagnosis"] == plain["diagnosis"]
    keep = ("class", "severity", "title", "hosts", "gpus", "onset")
    assert [[f.get(k) for k in keep] for f in bits["findings"]] == [
        [f.get(k) for k in keep] for f in plain["findings"]
    ]


def test_a_small_job_reads_each_gpus_utilisation_as_it_is():
    """1,024 GPUs: one series per GPU costs Prometheus less than the bits (0.2 s against 0.3 s of CPU)."""
    q = next(q for q in load_playbooks()["hang"].queries if q.name == "util_gpu")
    small = render_query(q, "nvidia", start=0.0, end=14400.0, interval=15.0, hosts=128, gpus=1024)
    big = render_query(q, "nvidia", start=0.0, end=7200.0, interval=15.0, hosts=1024, gpus=8192)
    assert LABEL not in small.promql and LABEL in big.promql


def test_a_counter_of_several_metrics_per_gpu_is_summed_per_host_before_the_rename(served_job):
    """DCGM's uncorrectable errors are three counters per GPU: each is summed by the exporter's `Hostname`
    and the parts joined by it, and `host` is named from it by Stepwise (no regex in Prometheus), and the series
    come back the same, values and all, as when every GPU's series is renamed first, on a job whose GPU's count
    grows."""
    client, _, _ = served_job("gpu-hardware-fault", 1, "nvidia")
    source = discover_source(client)
    q = next(q for q in load_playbooks()["gpu_health"].queries if q.name == "ecc_ue_host")
    a, b = source.time_range
    gpus = len(source.hosts) * (source.gpus_per_host or 0)
    planned = render_query(
        q, "nvidia", start=a, end=b, interval=source.interval, hosts=len(source.hosts), gpus=gpus
    )
    sig = PROFILES["nvidia"].signal("gpu_ecc_uncorrectable")
    assert planned.promql.count("sum by (Hostname) (increase(") == len(sig.selector.split(" | ")) > 1
    assert planned.relabel is not None and '"host", "$1"' not in planned.promql
    window = f"{int(math.ceil(planned.window_s))}s"
    parts = [
        replace(sig, selector=p, metrics=(p.split("{")[0],)).expr(
            "increase", window=window, by=("host",), agg="sum"
        )
        for p in sig.selector.split(" | ")
    ]
    renamed_first = "sum by (host) ({})".format(
        " or ".join(f'label_replace({e}, "stepwise_part", "{i}", "", "")' for i, e in enumerate(parts))
    )

    def answer(q) -> list:
        got = _to_result(q, client.query_range(q.promql, q.start, q.end, q.step))["series"]
        return sorted((sorted(s["labels"].items()), s["values"]) for s in got)

    summed_first = answer(planned)
    assert summed_first == answer(replace(planned, promql=renamed_first, relabel=None))
    assert any(v for _, values in summed_first for v in values)
