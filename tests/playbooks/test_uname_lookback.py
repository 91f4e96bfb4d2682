"""node_exporter scraped by address names its host only through node_uname_info{nodename}: a node that died
long before the data ends stopped reporting its uname with everything else, yet its earlier series are
still the source's. Generated jobs served by a real Prometheus."""

from __future__ import annotations

from playbooks.diagnose import run_diagnosis
from playbooks.hostnames import same_host
from playbooks.profiles._signal import uname_hosts
from playbooks.synth import Exporters
from playbooks.triage import triage_job

from .test_diagnose_scenarios import _serve


def test_a_node_dead_long_before_the_end_is_one_host_of_the_source_under_its_uname(served_job, view_root):
    """No GPU exporter: node_exporter at `IP:9100` is the only one naming hosts; its uname says the FQDN.
    The dead node (silent for 20-40 min, `long_wait`) is in the source's host list under that name, once,
    and the diagnosis names it once."""
    ex = Exporters(gpu="none", node_by_address=True, node_domain=".cluster.internal")
    client, truth, job_dir = _serve(
        served_job, view_root, "node-death", 1, "nvidia", exporters=ex, variants=("long_wait",)
    )
    (dead,) = [c["host"] for c in truth["culprits"]]
    assert truth["data_range"][1] - truth["onset"] > 1200, "dead for far longer than a 10-minute lookback"
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    hosts = result["source"]["hosts"]
    assert sorted(hosts) == sorted(h + ".cluster.internal" for h in truth["hosts"]), hosts
    assert [c["host"] for c in result["diagnosis"]["culprits"]] == [dead]
    named = {h for f in result["findings"] for h in f["hosts"]}
    assert [h for h in named if same_host(h, dead)] in ([], [dead]), named


def test_only_a_window_longer_than_the_recent_lookback_reads_the_uname_further_back():
    """A range query's rate window reads 10 min of uname samples at each step, a job-long window its whole."""
    assert "[4000s]" not in uname_hosts("5m") and "[10m]" in uname_hosts("5m")
    assert "[10m]" in uname_hosts("4000s") and "or on (stepwise_ip)" in uname_hosts("4000s")
    assert "[4000s]" in uname_hosts("4000s")
