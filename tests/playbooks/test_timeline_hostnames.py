"""One host name everywhere: the timeline and the comparison name each host as the diagnosis does.

node_exporter scraped by FQDN (`gpu-N.cluster.internal:9100`) or by address (`10.x.y.z:9100`, named through
node_uname_info's FQDN), DCGM and the scheduler by the short name: a generated job served by a real
Prometheus, diagnosed, then drawn. Host panels and GPU panels name the same hosts, the diagnosis's
culprit is the host a selected finding highlights in host panels (static/timeline_panels.js matches a
trace's meta.host against the finding's hosts), a host filter typed as either name finds the node, the
comparison lists each host once, and a hostile label value is escaped on its way to PromQL and Plotly.
"""

from __future__ import annotations

import numpy as np
import pytest

from playbooks import timeline as tl
from playbooks.compare import CompareJob, compare_jobs
from playbooks.diagnose import run_diagnosis
from playbooks.hostnames import host_names
from playbooks.plotly_text import plotly_text
from playbooks.profiles import resolve_profile
from playbooks.synth import Exporters
from playbooks.timeline.promql import _label_vector
from playbooks.triage import triage_job
from tests.playbooks.timeline_support import END, START, CannedClient, make_ctx, make_gpu, make_series

from .test_diagnose_scenarios import _serve

DOMAIN = ".cluster.internal"
DEPLOYMENTS = {
    "fqdn": Exporters(node_domain=DOMAIN),
    # kube-prometheus-stack: node_exporter at its node's IP:9100, node_uname_info names it by its FQDN
    "by-address": Exporters(
        kubernetes=True, node_by_address=True, gpu_host_label="hostname", node_domain=DOMAIN
    ),
}
GPU_PANELS, HOST_PANELS = ["gpu_temp", "gpu_power"], ["mem_used", "procs_running"]


def _hosts_drawn(figure: dict) -> set[str]:
    return {d["meta"]["host"] for d in figure["data"] if d["meta"].get("host")}


def _timeline(served_job, view_root, scenario, exporters):
    client, truth, job_dir = _serve(served_job, view_root, scenario, 1, "nvidia", exporters=exporters)
    triage = triage_job(job_dir).to_dict()
    result = run_diagnosis(client, triage=triage)
    prof = resolve_profile(client, client.label_values("__name__"))
    start, end = truth["data_range"]
    ctx = tl.context_build(client, prof, start, end)
    return client, truth, result, ctx, ctx.host_names(triage.get("nodes") or [])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=str)
def test_host_and_gpu_panels_name_the_hosts_the_diagnosis_names(served_job, view_root, deployment):
    """Lines and bands: every panel's traces, legends and outliers name the truth's hosts, never an FQDN or an
    address; the diagnosis's culprit is among the host panels' traces, so selecting it highlights them."""
    client, truth, result, ctx, names = _timeline(served_job, view_root, "host-oom", DEPLOYMENTS[deployment])
    assert any(h.endswith(DOMAIN) for h in ctx.hosts), f"the TSDB names hosts by FQDN too: {ctx.hosts}"
    hosts = set(truth["hosts"])
    culprits = {c["host"] for c in result["diagnosis"]["culprits"]}
    assert culprits and culprits <= hosts, result["diagnosis"]["summary"]
    start, end = truth["data_range"]
    for max_lines in (16, 2):
        panels = tl.panels_fetch(client, ctx, GPU_PANELS + HOST_PANELS, start, end, max_lines=max_lines)
        figures = {p.spec.key: tl.figure_build(p, ctx, names=names) for p in panels}
        for key, fig in figures.items():
            drawn = _hosts_drawn(fig)
            named = {d["name"].split(" GPU ")[0].split(" (")[0] for d in fig["data"] if d["meta"].get("host")}
            assert drawn <= hosts and named <= hosts, (key, max_lines, drawn, named)
            assert {o["host"] for o in fig["layout"]["meta"]["outliers"]} <= hosts, (key, max_lines)
            if max_lines == 16:
                assert drawn == hosts, (key, drawn)
        mem = figures["mem_used"]
        assert mem["layout"]["meta"]["mode"] == ("lines" if max_lines == 16 else "band")
        # a line of every host, or the band's top deviations: the culprit's is the one a finding highlights
        assert culprits <= _hosts_drawn(mem), (max_lines, _hosts_drawn(mem))


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=str)
def test_a_host_filter_typed_as_either_name_finds_the_node(served_job, view_root, deployment):
    """In band mode a selected host is drawn on every panel whichever name it is asked by: the scheduler's,
    node_exporter's FQDN (or its address:port); the PromQL selects the exporter's own label values."""
    client, truth, _, ctx, names = _timeline(served_job, view_root, "healthy", DEPLOYMENTS[deployment])
    host = truth["hosts"][1]
    fqdn = next(h for h in ctx.hosts if h.startswith(host + "."))
    typed = [host, fqdn]
    typed += [i for i, n in ctx.uname if n == fqdn]  # the address node_exporter is scraped at
    start, end = truth["data_range"]
    for name in typed:
        selected = names.select([name])
        assert set(selected) == {host, fqdn}, (name, selected)
        panels = tl.panels_fetch(
            client, ctx, ["gpu_temp", "mem_used"], start, end, max_lines=2, hosts=selected
        )
        for p in panels:
            fig = tl.figure_build(p, ctx, names=names)
            chosen = {d["meta"]["host"] for d in fig["data"] if d["meta"]["role"] == "host"}
            outliers = {d["meta"]["host"] for d in fig["data"] if d["meta"]["role"] in ("outlier", "top")}
            assert host in chosen | outliers, (name, p.spec.key, p.queries[-1][:200])
            assert chosen <= {host}, chosen


def test_the_comparison_names_each_host_once(served_job, job_factory):
    """Two runs with node_exporter scraped by FQDN: each job's hosts once, by the scheduler's names, and every
    host a finding or culprit names is one of them."""
    ex = Exporters(node_domain=DOMAIN)
    dirs = [job_factory(s, 1, "nvidia", exporters=ex) for s in ("healthy", "rdma-degradation")]
    result = compare_jobs([CompareJob(served_job.dir(d), triage_job(d).to_dict()) for d, _ in dirs])
    for (_, truth), source in zip(dirs, result["sources"], strict=True):
        assert source["hosts"] == sorted(truth["hosts"]), source["hosts"]
    named = {c["host"] for c in result["diagnosis"]["culprits"]} | {
        h for f in result["findings"] for h in f["hosts"]
    }
    assert named <= set(dirs[1][1]["hosts"]), sorted(named)


HOSTILE = '<img src=x onerror=alert(1)>"$1\\\nnode'


def test_a_hostile_host_name_is_escaped_in_promql_and_plotly(served_job):
    """A host whose label holds markup, quotes, `$1`, a backslash and a newline: the PromQL selecting it by
    either name is read by a real Prometheus as that value; its legends and hover text show it escaped, and
    the meta the page matches a finding's hosts against holds the one name unchanged."""
    names = host_names([HOSTILE, HOSTILE + DOMAIN, "n1"])
    assert names.name(HOSTILE + DOMAIN + ":9100") == HOSTILE
    client, _, _ = served_job("healthy")
    for typed in (HOSTILE, HOSTILE + DOMAIN):
        selected = names.select([typed])
        assert set(selected) == {HOSTILE, HOSTILE + DOMAIN}
        found = client.query(f"({_label_vector([{'host': h} for h in selected])})")
        assert sorted(s.labels["host"] for s in found) == sorted(selected)
    series = [make_gpu("n1", g, 60.0) for g in range(4)] + [make_gpu(HOSTILE, 0, 60.0, bump=30.0)]
    series.append(make_series({"host": HOSTILE + DOMAIN}, [60.0] * len(series[0].timestamps)))
    (panel,) = tl.panels_fetch(
        CannedClient(lambda q: series), make_ctx("nvidia", gpus=5), ["gpu_temp"], START, END
    )
    fig = tl.figure_build(panel, make_ctx("nvidia", gpus=5), names=names)
    assert {d["meta"]["host"] for d in fig["data"]} == {"n1", HOSTILE}
    for d in fig["data"]:
        assert "<img" not in d["name"] and "<img" not in d["hovertemplate"]
    assert any(d["name"].startswith(plotly_text(HOSTILE)) for d in fig["data"])
    assert [o["host"] for o in fig["layout"]["meta"]["outliers"]] == [HOSTILE]


def test_a_free_promql_series_scraped_by_address_is_highlighted_under_its_hosts_one_name():
    """A PromQL panel keeps each series' own text, in its own order; a series whose `instance` the source
    names (node_exporter at 10.0.3.17:9100, named by node_uname_info) carries that host's one name."""
    names = host_names(
        ["gpu-1", "gpu-1.cluster.internal"], uname=[("10.0.3.17:9100", "gpu-1.cluster.internal")]
    )
    spec = tl.PanelSpec(key="promql", signal="", domain="custom", title="PromQL", unit="")
    t = make_gpu("x", 0, 1.0)
    times, values = np.asarray(t.timestamps), np.asarray(t.values)
    traces = [
        tl.Trace(f'node_load1{{instance="{i}"}}', "line", {"instance": i}, times, values)
        for i in ("10.0.9.9:9100", "10.0.3.17:9100")
    ]
    fig = tl.figure_build(tl.PanelData(spec, "lines", traces=traces, step=15.0), make_ctx(), names=names)
    assert [d["name"] for d in fig["data"]] == [tr.name for tr in traces]
    assert [d["meta"].get("host") for d in fig["data"]] == [None, "gpu-1"]


def test_the_comparisons_per_host_figures_are_keyed_by_each_hosts_one_name():
    """node_exporter's FQDN series and DCGM's short ones of one node meet under its one name, so a host the
    comparison blames (RDMA on some hosts, a hot GPU) is named as the diagnosis and the timeline name it."""
    from playbooks._compare_figures import Job, extreme_gpus, per_host
    from playbooks.profiles import PROFILES
    from playbooks.prometheus import InstantSample

    client = CannedClient(lambda q: [])
    client.instant = [InstantSample({"host": "gpu-1.cluster.internal", "gpu": "3"}, END, 2.0)]
    job = Job(0, client, None, PROFILES["nvidia"], "", ["gpu-1"], 8, (START, END), [START], [0.0])
    job.names = host_names(["gpu-1", "gpu-1.cluster.internal"])
    assert per_host(job, "rdma_retransmits", ("0.5",), 1) == [{"gpu-1": 2.0}]
    assert extreme_gpus(job, "gpu_temp", True, 1) == [("gpu-1", "3", 2.0)]
