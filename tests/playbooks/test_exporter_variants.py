"""Real exporters as people deploy them: each variant generated, served by a real Prometheus, diagnosed.

Every case builds a job whose exporters are deployed one way (dcgm-exporter's host label `Hostname`,
`hostname` or none; Kubernetes labels; the deployer's job names; node_exporter scraped by address; a
stale Xid; remapped-row fields; node_exporter >= 1.11 RDMA counters; DCGM's 30 s collection; a late
exporter; a restarted exporter pod; AMD's device-metrics-exporter) and checks that the diagnosis keeps
the verdict the plain deployment gets: class, family, culprit hosts (by their node names), no warning on
a healthy job.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import discover_source, run_diagnosis
from playbooks.profiles import PROFILES
from playbooks.synth import Exporters
from playbooks.triage import triage_job

from .test_diagnose_scenarios import _serve


def _diagnose(served_job, view_root, scenario, profile, exporters, seed=1, **kw):
    client, truth, job_dir = _serve(served_job, view_root, scenario, seed, profile, exporters=exporters, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth, client


def _verdict_holds(result, truth):
    d = result["diagnosis"]
    assert (d["class"], d["root_cause_family"]) == (truth["class"], truth["root_cause_family"]), d["summary"]
    assert sorted(c["host"] for c in d["culprits"]) == sorted(c["host"] for c in truth["culprits"]), d[
        "summary"
    ]
    if truth["class"] == "healthy":
        assert [f["title"] for f in result["findings"] if f["severity"] != "info"] == []


VARIANTS = [
    ("hostname-lower", Exporters(gpu_host_label="hostname")),
    ("no-hostname", Exporters(gpu_host_label="")),
    (
        "kubernetes",
        Exporters(
            kubernetes=True, node_by_address=True, node_job="node-exporter", gpu_job="nvidia-dcgm-exporter"
        ),
    ),
    ("renamed-jobs", Exporters(node_job="prometheus-node-exporter", gpu_job="gpu-metrics")),
    ("node-by-address", Exporters(node_by_address=True)),
    ("dcgm-30s", Exporters(gpu_collect_s=30.0)),
    ("late-exporter", Exporters(gpu_late_scrapes=1)),
    ("relabelled-hosts", Exporters(host_domain=".cluster.internal")),
]


@pytest.mark.parametrize(
    ("scenario", "variant"),
    [(s, v) for s in ("gpu-hardware-fault", "healthy") for v in VARIANTS],
    ids=lambda x: x[0] if isinstance(x, tuple) else x,
)
def test_a_deployment_variant_keeps_the_verdict(served_job, view_root, scenario, variant):
    """Host labels, job names, addresses, collection intervals and late exporters change nothing."""
    name, ex = variant
    result, truth, _ = _diagnose(served_job, view_root, scenario, "nvidia", ex)
    _verdict_holds(result, truth)
    hosts = set(result["source"]["hosts"])
    assert hosts == set(truth["hosts"]), f"{name}: one node under two names, or a host missed"


def test_a_stale_xid_from_before_the_job_is_no_event(served_job, view_root):
    """DCGM keeps the last Xid until it restarts: a value held all job long is not a GPU fault."""
    result, truth, _ = _diagnose(served_job, view_root, "healthy", "nvidia", Exporters(stale_xid=True))
    assert truth["red_herrings"].get("stale_xid")
    _verdict_holds(result, truth)


def test_remapped_rows_stand_in_for_ecc_counters(served_job, view_root):
    """The default counter set has no ECC SBE/DBE: the uncorrectable remapped rows reveal the bad GPU."""
    result, truth, _ = _diagnose(
        served_job, view_root, "gpu-hardware-fault", "nvidia", Exporters(ecc="remapped")
    )
    _verdict_holds(result, truth)
    ecc = [f for f in result["findings"] if f["class"] == "gpu-hardware-fault" and f["severity"] != "info"]
    assert any("ecc" in f["title"].lower() or "uncorrectable" in f["title"].lower() for f in ecc), ecc


def test_a_restarted_exporter_pod_with_two_host_names_does_not_break_matching(served_job, view_root):
    """One instance with two Hostname values in the window: no many-to-many error, the verdict holds."""
    result, truth, _ = _diagnose(
        served_job, view_root, "gpu-hardware-fault", "nvidia", Exporters(hostname_change=True)
    )
    assert result["diagnosis"]["class"] == truth["class"]
    assert not any("many-to-many" in str(e) for e in result.get("errors", {}).values())
    assert all("many-to-many" not in f["title"] for f in result["findings"])


@pytest.mark.parametrize(
    "variant",
    [
        Exporters(kubernetes=True, gpu_host_label="", hostname_change=True),
        Exporters(gpu_host_label="", hostname_change=True),
    ],
    ids=["pod-ip", "node-ip-then-pod-ip"],
)
def test_a_gpu_exporter_pod_back_at_another_address_is_the_same_host(served_job, view_root, variant):
    """`--no-hostname`: the restarted DCGM pod reports the same GPU UUIDs from a new address. The address
    whose series stopped (or started) is that node before (after) the restart, not a second host."""
    result, truth, client = _diagnose(served_job, view_root, "healthy", "nvidia", variant)
    addresses = {i.rsplit(":", 1)[0] for i in client.label_values("instance", ["DCGM_FI_DEV_GPU_TEMP"])}
    assert len(addresses) == len(truth["hosts"]) + 1, "the generator moved one GPU exporter pod"
    assert result["diagnosis"]["class"] == "healthy", result["diagnosis"]
    named = addresses & set(result["source"]["hosts"])
    assert len(named) <= len(truth["hosts"]), "the address the pod left names no host of its own"


def test_node_exporter_rdma_counters_feed_the_rdma_rules(served_job, view_root):
    """node_exporter >= 1.11 exports RoCE retransmits and ACK timeouts; the network playbook reads them."""
    result, truth, client = _diagnose(
        served_job, view_root, "rdma-degradation", "nvidia", Exporters(rdma_hw_counters=True)
    )
    prof = PROFILES[result["source"]["profile"]]
    assert prof.available(client.label_values("__name__"))["rdma_retransmits"]
    _verdict_holds(result, truth)


@pytest.mark.parametrize("scenario", ["healthy", "thermal-straggler", "gpu-hardware-fault"])
def test_amd_device_metrics_exporter(served_job, view_root, scenario):
    """AMD's device-metrics-exporter: hostname/gpu_id labels, partition 0 only, card_model names the GPU."""
    result, truth, client = _diagnose(
        served_job,
        view_root,
        scenario,
        "amd-dme",
        Exporters(
            gpu="amd-dme", gpu_host_label="hostname", gpu_job="amd-device-metrics-exporter", prefix="amd_"
        ),
    )
    assert result["source"]["profile"].partition("@")[0] == "amd-dme"
    assert result["source"]["gpus_per_host"] == truth["gpus_per_host"], (
        "the 0 W second partition is not a GPU"
    )
    assert discover_source(client).gpu_model == truth["gpu_model"], "card_model names the GPU"
    _verdict_holds(result, truth)


def test_a_node_exporter_only_tsdb_is_diagnosed_with_what_is_there(served_job, view_root):
    """No GPU exporter: the node profile is recognised (no refusal) and the GPU signals are named as missing."""
    result, truth, _ = _diagnose(served_job, view_root, "healthy", "nvidia", Exporters(gpu="none"))
    assert result["source"]["profile"].partition("@")[0] == "node"
    assert result["diagnosis"]["class"] == "healthy"
    absent = [
        f for f in result["findings"] if "gpu_power" in " ".join(str(e["value"]) for e in f["evidence"])
    ]
    assert absent, [f["title"] for f in result["findings"]]


@pytest.mark.parametrize(
    "variant",
    [Exporters(gpu_host_label=""), Exporters(hostname_change=True)],
    ids=["no-hostname", "restarted-pod"],
)
def test_timeline_bands_name_hosts_as_the_diagnosis_does(served_job, view_root, variant):
    """Many GPUs draw a band with named outliers: host names come from node_uname_info / the alias, not IPs."""
    from playbooks import timeline as tl
    from playbooks.profiles import resolve_profile

    client, truth, _ = _serve(
        served_job, view_root, "thermal-straggler", 1, "nvidia", exporters=variant, gpus=8
    )
    prof = resolve_profile(client, client.label_values("__name__"))
    start, end = truth["data_range"]
    ctx = tl.context_build(client, prof, start, end)
    (panel,) = tl.panels_fetch(client, ctx, ["gpu_temp"], start, end, max_lines=4)
    assert panel.mode == "band", panel.message
    named = {o["host"] for o in panel.outliers}
    assert named and named <= set(truth["hosts"]), named


@pytest.mark.parametrize(
    ("scenario", "by_address"),
    [("host-oom", False), ("thermal-straggler", False), ("node-death", True), ("node-death", False)],
)
def test_a_host_node_exporter_knows_by_its_fqdn_keeps_its_one_name(
    served_job, view_root, scenario, by_address
):
    """node_exporter scraped at `gpu-N.cluster.internal:9100` or at its IP (uname: the FQDN), DCGM and the
    scheduler say `gpu-N`: the culprit and every finding name the host once, by the scheduler's name. A
    host that died 20-40 min before the data ends (`long_wait`) stopped reporting its uname long before:
    it is still one host (corpus D seed 2 07 named it twice, short and FQDN)."""
    ex = Exporters(node_domain=".cluster.internal", node_by_address=by_address)
    kw = {"variants": ("long_wait",)} if scenario == "node-death" else {}
    result, truth, _ = _diagnose(served_job, view_root, scenario, "nvidia", ex, **kw)
    assert any(h.endswith(".cluster.internal") for h in result["source"]["hosts"]), "the TSDB holds FQDNs"
    _verdict_holds(result, truth)
    named = {h for f in result["findings"] for h in f["hosts"]}
    named |= {e["labels"]["host"] for f in result["findings"] for e in f["evidence"] if "host" in e["labels"]}
    assert named <= set(truth["hosts"]), sorted(named - set(truth["hosts"]))


def test_gpu_exporter_scrapes_failing_at_random_everywhere_accuse_no_host(served_job, view_root):
    """Every host's GPU exporter fails a few scrapes at random (up 0, the timeout as the scrape's duration):
    a host that drew a few close together does not stand out from a pack that fails as often."""
    result, truth, _ = _diagnose(served_job, view_root, "healthy", "nvidia", Exporters(failed_scrapes=0.06))
    print([(f["title"], f["severity"]) for f in result["findings"] if f["severity"] != "info"])
    _verdict_holds(result, truth)


@pytest.mark.parametrize(
    ("scenario", "seed"),
    [
        ("training-instability", 1),
        ("healthy", 1),
        ("healthy", 50),
        ("collective-hang", 50),
        ("network-hang", 50),
    ],
)
def test_without_trainer_gauges_the_logs_losses_are_judged(served_job, view_root, scenario, seed):
    """#10 (corpus D 01): the trainer exports no training_* gauges, its step lines print the loss: a divergence
    is read from the log's losses (it was a collective hang: steps stopped, GPUs spinning), a healthy run's
    losses raise nothing. Step lines without a time are placed at the training's start plus the steps' own
    seconds: a completed job is no hang before its first step (seed 50's healthy job was a collective hang)
    and a hang or a network hang is still found (they were healthy without the placing)."""
    result, truth, _ = _diagnose(
        served_job, view_root, scenario, "nvidia", Exporters(trainer_gauges=False), seed=seed
    )
    _verdict_holds(result, truth)
    if scenario == "training-instability":
        loss = [f for f in result["findings"] if f["title"] == "Loss jumps"]
        assert loss and loss[0]["evidence"][0]["query"].startswith("log:"), result["findings"]


def test_a_dead_node_whose_gpus_are_named_by_their_pod_ip_is_named_once(served_job, view_root):
    """`--no-hostname` on Kubernetes: DCGM is scraped at its pod IP, which no node_uname_info names, while
    node_exporter names the node. When the node dies, its node name and its GPU exporter's pod IP go
    silent together: one dead node, named by its node name, not two."""
    ex = Exporters(kubernetes=True, gpu_host_label="")
    result, truth, _ = _diagnose(served_job, view_root, "node-death", "nvidia", ex)
    _verdict_holds(result, truth)
