"""utkuozdemir/nvidia_gpu_exporter instead of DCGM (#10, corpus F): `nvidia_smi_*` metrics in base units
with a `uuid` label only, the GPU index the value of `nvidia_smi_index{uuid}` (and a label of
`nvidia_smi_gpu_info`), no host label. Generated, served by a real Prometheus, diagnosed: culprits read
{host, gpu index}, the GPU exporter's ghost data is seen, a healthy job stays healthy.
"""

from __future__ import annotations

import pytest

from playbooks._diagnose_source import _model_evidence
from playbooks.diagnose import discover_source
from playbooks.profiles import PROFILES
from playbooks.synth import Exporters
from playbooks.synth._models import GPU_MODELS

from .test_exporter_variants import _diagnose, _verdict_holds

NVSMI = Exporters(gpu="nvsmi", gpu_job="nvidia_gpu_exporter")


@pytest.mark.parametrize(
    "scenario", ["healthy", "thermal-straggler", "monitoring-ghost-data", "gpu-driver-fault"]
)
def test_nvidia_gpu_exporter_keeps_the_verdict(served_job, view_root, scenario):
    result, truth, client = _diagnose(served_job, view_root, scenario, "nvidia", NVSMI)
    names = client.label_values("__name__")
    assert "nvidia_smi_temperature_gpu" in names and not any(n.startswith("DCGM_") for n in names)
    prof = PROFILES[result["source"]["profile"]]
    assert prof.base == "nvidia-smi"
    assert all(prof.available(names)[s] for s in ("gpu_power", "gpu_temp", "gpu_util", "gpu_clock"))
    _verdict_holds(result, truth)
    assert result["source"]["gpus_per_host"] == truth["gpus_per_host"]
    # nvidia_smi_gpu_info{name} names the model (its power and thermal priors), not only VRAM and power
    assert discover_source(client).gpu_model == truth["gpu_model"]
    span, end = "1d", float(truth["data_range"][1])
    names = _model_evidence(client, prof, prof.available(names), span, end)[0]
    assert GPU_MODELS[truth["gpu_model"]].dcgm_model_name in names
    if scenario == "thermal-straggler":
        got = {(c["host"], str(c.get("gpu"))) for c in result["diagnosis"]["culprits"]}
        assert got == {(c["host"], str(c["gpu"])) for c in truth["culprits"]}, result["diagnosis"]["summary"]


def test_the_gpu_index_comes_from_gpu_info_or_the_uuid_stands(served_job, view_root):
    """Without nvidia_smi_index the info metric's `index` label names the GPU; without either, its uuid."""
    _, truth, client = _diagnose(served_job, view_root, "thermal-straggler", "nvidia", NVSMI)
    at = float(truth["data_range"][1]) - 60.0
    for name, want in (
        ("nvidia-smi", "index"),
        ("nvidia-smi@nvsmi.gpu_index=nvidia_smi_gpu_info", "index"),
        ("nvidia-smi@nvsmi.gpu_index=-", "uuid"),
    ):
        got = client.query(PROFILES[name].expr("gpu_temp"), at=at)
        gpus = {s.labels["gpu"] for s in got}
        assert len(got) == len({(s.labels["host"], s.labels["gpu"]) for s in got}) > truth["gpus_per_host"], (
            name
        )
        if want == "index":
            assert gpus == {str(i) for i in range(truth["gpus_per_host"])}, name
        else:
            assert all(g.startswith("GPU-") for g in gpus), name


def test_timeline_gpu_panels_name_each_gpu_by_host_and_index(served_job, view_root):
    """Lines and bands of the GPU panels: each trace and outlier is a truth host's GPU by its index."""
    from playbooks import timeline as tl
    from playbooks.profiles import resolve_profile

    _, truth, client = _diagnose(served_job, view_root, "thermal-straggler", "nvidia", NVSMI)
    prof = resolve_profile(client, client.label_values("__name__"))
    start, end = truth["data_range"]
    ctx = tl.context_build(client, prof, start, end)
    index = {str(i) for i in range(truth["gpus_per_host"])}
    for max_lines in (1000, 2):
        for panel in tl.panels_fetch(client, ctx, ["gpu_temp", "gpu_util"], start, end, max_lines=max_lines):
            fig = tl.figure_build(panel, ctx)
            metas = [d["meta"] for d in fig["data"] if d["meta"].get("host")]
            metas += fig["layout"]["meta"]["outliers"]
            assert metas, (panel.spec.key, max_lines)
            assert {m["host"] for m in metas} <= set(truth["hosts"]), (panel.spec.key, max_lines)
            gpus = {str(m["gpu"]) for m in metas if m.get("gpu") is not None}
            assert gpus and gpus <= index, (panel.spec.key, max_lines, metas[:3])


def test_the_nvml_backends_xid_events_name_the_gpu(served_job, view_root):
    """The NVML backend's `nvidia_smi_xid_last_timestamp_seconds{uuid, xid}` (the code a label, the series
    there from the first event): the Xid rules read the code while it is new, on the GPU by its index (the
    windowed query a subquery with its own step: a served copy's evaluation interval is 999h)."""
    result, truth, client = _diagnose(served_job, view_root, "gpu-hardware-fault", "nvidia", NVSMI)
    assert "nvidia_smi_xid_last_timestamp_seconds" in client.label_values("__name__")
    _verdict_holds(result, truth)
    found = [f for f in result["findings"] if f["title"].startswith("Xid ") and "(job log)" not in f["title"]]
    assert found, [f["title"] for f in result["findings"]]
    assert found[0]["class"] == "gpu-hardware-fault"
    assert found[0]["hosts"] == [c["host"] for c in truth["culprits"]]
    want = {str(c["gpu"]) for c in truth["culprits"] if c.get("gpu") is not None}
    assert not want or set(found[0]["gpus"]) == want
