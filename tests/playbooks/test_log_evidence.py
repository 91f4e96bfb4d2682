"""The log's host events as the diagnosis's corroboration (issue 10 modes 5, 10, 11), end to end: a generated
job served by a real Prometheus, its log with lines appended in the test, triaged and diagnosed.

healthy 1 brushes the memory limit on one host during a save without a kill (the generator's
`near_limit_save` variant); collective-hang 1 hangs with every host reporting to the end.
"""

from __future__ import annotations

import datetime as dt
import re

import numpy as np
import pytest

from playbooks.anomaly import Grid
from playbooks.context import Context, Finding, Timeline
from playbooks.decision import decide_diagnosis
from playbooks.diagnose import run_diagnosis
from playbooks.triage import find_job_log, triage_log

NEAR = "Host memory reached its limit"  # the title of host_oom.memory_exhausted (findings carry no rule id)


def _diagnose(served_job, scenario, seed, profile, extra):
    """Diagnose the job with `extra(truth, near_host)` lines added before its log's last stage line."""
    client, truth, job_dir = served_job(scenario, seed, profile)
    lines = find_job_log(job_dir).read_text().splitlines()
    base = run_diagnosis(client, triage=triage_log(lines).to_dict())
    near = [f["hosts"][0] for f in base["findings"] if f["title"].startswith(NEAR)]
    cut = next((i for i, ln in enumerate(lines) if ln.startswith("== Training")), len(lines))
    added = extra(truth, near[0] if near else None)
    triage = triage_log(lines[:cut] + added + lines[cut:]).to_dict()
    return base, run_diagnosis(client, triage=triage), truth, triage


def _syslog(t: float) -> str:
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    return f"{d:%b} {d.day:2d} {d:%H:%M:%S}"


def _hosts(result) -> list[str]:
    return [c["host"] for c in result["diagnosis"]["culprits"]]


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_near_limit_memory_with_a_sigkill_on_that_host_is_host_oom(served_job, profile):
    """Mode 11: memory at the limit is a note; the same host's task killed with exit 137 makes it the OOM,
    and the onset is the rise to the limit, not the kill."""
    base, result, truth, _ = _diagnose(
        served_job,
        "healthy",
        1,
        profile,
        lambda tr, near: [f"srun: error: {near}: task 1: Exited with exit code 137"],
    )
    assert base["diagnosis"]["class"] == "healthy"
    near = next(f for f in base["findings"] if f["title"].startswith(NEAR))
    assert result["diagnosis"]["class"] == "host-oom"
    assert _hosts(result) == near["hosts"]
    assert result["diagnosis"]["onset"] == near["onset"]
    (log,) = [f for f in result["findings"] if f["title"].endswith("(job log)")]
    assert log["evidence"][0]["query"].startswith("job log, line ") and "137" in log["evidence"][0]["value"]


def test_a_sigkill_on_a_host_whose_memory_was_fine_is_no_oom(served_job):
    """Mode 11's control: exit 137 alone (a host far from its limit) is a kill by someone, not an OOM."""
    _, result, truth, triage = _diagnose(
        served_job,
        "healthy",
        1,
        "amd",
        lambda tr, near: [
            f"srun: error: {h}: task {i}: Exited with exit code 137"
            for i, h in enumerate(tr["hosts"])
            if h != near
        ],
    )
    assert len([e for e in triage["details"]["host_events"] if e["code"] == 137]) == len(truth["hosts"]) - 1
    assert result["diagnosis"]["class"] == "healthy"


def test_a_kernel_oom_kill_in_the_log_is_host_oom_on_that_host(served_job):
    """Mode 10: the kill fell after the last scrape (no counter growth); the kernel's line names the host
    and dates the kill."""

    def extra(tr, near):
        t = tr["data_range"][1] - 20
        return [
            f"{_syslog(t)} {tr['hosts'][2]} kernel: Out of memory: Killed process 4242 (python3) total-vm:9kB"
        ]

    _, result, truth, _ = _diagnose(served_job, "healthy", 1, "nvidia", extra)
    assert result["diagnosis"]["class"] == "host-oom"
    assert _hosts(result) == [truth["hosts"][2]]
    assert result["diagnosis"]["onset"] == pytest.approx(int(truth["data_range"][1] - 20), abs=1)


def test_a_node_slurm_reports_failed_is_node_death_on_that_host(served_job):
    """Modes 5 and 10: the node died in the last scrape, so the TSDB shows only the hang; Slurm's line names
    the dead node, which becomes the culprit instead of the hang's odd host."""
    base, result, truth, _ = _diagnose(
        served_job,
        "collective-hang",
        1,
        "amd",
        lambda tr, near: [f"srun: error: Node failure on {tr['hosts'][2]}"],
    )
    assert base["diagnosis"]["class"] == "collective-hang"
    assert _hosts(base) != [truth["hosts"][2]]
    assert result["diagnosis"]["class"] == "node-death"
    assert _hosts(result) == [truth["hosts"][2]]
    assert result["diagnosis"]["onset"] == base["diagnosis"]["onset"]  # when the steps stopped


@pytest.mark.parametrize(("code", "klass"), [(79, "gpu-hardware-fault"), (13, "healthy")])
def test_a_hardware_xid_in_the_last_minute_is_a_gpu_fault_on_its_host(served_job, code, klass):
    """Mode 10: an Xid 79 30 s before the data ends, which no scrape saw, names its host and its time; Xid 13
    (the program's own fault) does not."""

    def extra(tr, near):
        t = tr["data_range"][1] - 30
        return [
            f"{_syslog(t)} {tr['hosts'][1]} kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python3"
        ]

    _, result, truth, _ = _diagnose(served_job, "healthy", 1, "nvidia", extra)
    assert result["diagnosis"]["class"] == klass
    if klass != "healthy":
        assert _hosts(result) == [truth["hosts"][1]]
        assert result["diagnosis"]["onset"] == pytest.approx(int(truth["data_range"][1] - 30), abs=1)


@pytest.mark.parametrize(
    ("profile", "smi", "bus", "gpu"),
    [("nvidia", False, "38", "2"), ("amd", False, "4b", None), ("amd", True, "4b", "3")],
)
def test_an_xid_is_placed_on_the_gpu_at_its_pci_bus(served_job, profile, smi, bus, gpu):
    """#10 a: an Xid names a PCI bus, not a GPU. DCGM labels each GPU with its `pci_bus_id` (the generator's
    GPU g sits at bus 0x18 + 0x10 g); the seed system's exporters have none, so the GPU stays unknown
    unless nvidia-smi's lines in the log (here another board layout: 0x1b + 0x10 g) place it."""

    def extra(tr, near):
        t = tr["data_range"][1] - 30
        table = [f"{g}, 00000000:{0x1B + 0x10 * g:02X}:00.0" for g in range(4)] if smi else []
        xid = f"{_syslog(t)} {tr['hosts'][1]} kernel: NVRM: Xid (PCI:0000:{bus}:00): 79, pid=1, name=python3"
        return [*table, xid]

    _, result, truth, triage = _diagnose(served_job, "healthy", 1, profile, extra)
    (e,) = [e for e in triage["details"]["host_events"] if e["kind"] == "xid"]
    assert e["pci"] == f"0000:{bus}:00"
    assert result["diagnosis"]["class"] == "gpu-hardware-fault"
    assert result["diagnosis"]["culprits"] == [{"host": truth["hosts"][1], "gpu": gpu}]


def test_a_triage_waited_for_after_the_first_queries_gives_the_same_diagnosis(served_job):
    """run_diagnosis(triage=fn) (the command, while the log is being triaged): the queries the log does not
    change run first, fn() is called once after them, then what the log adds (the Xid host's PCI buses)."""

    def extra(tr, near):
        t = tr["data_range"][1] - 30
        return [f"{_syslog(t)} {tr['hosts'][1]} kernel: NVRM: Xid (PCI:0000:38:00): 79, pid=1, name=python3"]

    _, result, truth, triage = _diagnose(served_job, "healthy", 1, "nvidia", extra)
    client, _, _ = served_job("healthy", 1, "nvidia")
    before, asked = client.stats.requests, []

    def later():
        asked.append(client.stats.requests - before)
        return triage

    lazy = run_diagnosis(client, triage=later)
    assert len(asked) == 1 and asked[0] >= 20
    assert lazy["diagnosis"] == result["diagnosis"] and lazy["findings"] == result["findings"]
    assert lazy["diagnosis"]["culprits"] == [{"host": truth["hosts"][1], "gpu": "2"}]
    assert lazy["timings"]["queries"] == result["timings"]["queries"]


# ------------------------------------------------------------------------------ the weighing, hand-made findings


class _Source:
    hosts = ("h00", "h01", "h02", "h03")


def _ctx(events, stalled=True, last_advance=5000.0):
    tl = Timeline(
        start=0.0, end=10_000.0, train_start=100.0, stalled=stalled, last_advance=last_advance, step_s=10.0
    )
    triage = {"job": {}, "details": {"host_events": events}}
    return Context(results={}, meta={}, timeline=tl, triage=triage, source=_Source(), gpu=None)


def _ev(kind, host, time=None, code=None, line=900):
    return {"kind": kind, "host": host, "time": time, "line": line, "code": code, "text": f"{kind} {host}"}


def _f(rule, klass, sev, hosts, onset, role="cause"):
    return Finding("p", rule, klass, sev, role, list(hosts), [], onset, rule, [])


def test_silence_on_several_hosts_narrows_to_the_host_slurm_named():
    """Two hosts went quiet (the dead one and a peer whose exporter stopped with the job): Slurm's line says
    which one died."""
    silent = _f("host_silent", "node-death", "critical", ["h01", "h02"], 5010.0)
    d = decide_diagnosis(_ctx([_ev("node-failure", "h02.cluster.example", 5300.0)]), [silent])
    assert d["class"] == "node-death" and [c["host"] for c in d["culprits"]] == ["h02"]
    assert silent.evidence[0]["query"] == "job log, line 900" and silent.evidence[0]["labels"] == {
        "host": "h02"
    }


def test_an_xid_before_the_silence_is_the_node_deaths_onset_and_after_it_is_not():
    silent = _f("host_silent", "node-death", "critical", ["h01"], 5000.0)
    d = decide_diagnosis(_ctx([_ev("xid", "h01", 4700.0, 79)]), [silent])
    assert d["class"] == "node-death" and d["onset"] == 4700.0
    silent = _f("host_silent", "node-death", "critical", ["h01"], 5000.0)
    d = decide_diagnosis(_ctx([_ev("xid", "h01", 9000.0, 79), _ev("xid", "h01", 1000.0, 48)]), [silent])
    assert d["onset"] == 5000.0  # one after the silence, one far beyond the lookback: neither moves it


def test_a_kill_where_the_counter_already_grew_is_evidence_not_a_second_cause():
    counter = _f("oom_kill", "host-oom", "critical", ["h03"], 4000.0)
    near = _f("memory_exhausted", "host-oom", "info", ["h03"], 3900.0, role="symptom")
    findings = [counter, near]
    d = decide_diagnosis(_ctx([_ev("killed", "h03", code=137), _ev("killed", "h01", code=143)]), findings)
    assert d["class"] == "host-oom" and [c["host"] for c in d["culprits"]] == ["h03"]
    assert len(findings) == 2 and [e["labels"]["host"] for e in counter.evidence] == ["h03"]


def test_without_host_events_the_decision_is_unchanged():
    """The control: the same findings without a log (or with events naming no host) decide as before."""
    silent = _f("host_silent", "node-death", "critical", ["h01", "h02"], 5010.0)
    d = decide_diagnosis(_ctx([_ev("node-failure", None, 5300.0)]), [silent])
    assert [c["host"] for c in d["culprits"]] == ["h01", "h02"] and silent.evidence == []


IOMMU = (
    '{h}:4101:4101 [0] NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system '
    "instablity or hang!"
)


# An NCCL warning no list of harmless lines holds: the training going on after it says it ended nothing.
SYSFS = "{h}:4101:4101 [0] NCCL WARN Could not find real path of /sys/class/net/ib0/device"


@pytest.mark.parametrize("advisory", [IOMMU, SYSFS], ids=["iommu", "any-warning"])
@pytest.mark.parametrize("scenario", ["heartbeat-false-positive", "healthy"])
def test_nccl_iommu_advisory_during_training_is_no_failure(served_job, scenario, advisory):
    """#10 (corpus D 11, 13): NCCL's init advisory about the IOMMU, or any NCCL warning the training went on
    after, logged a third of the way through training, is no failure: it neither dates the crash (the heartbeat
    timeout's onset is the kill minus the timeout) nor turns a healthy job into a hang."""
    client, truth, job_dir = served_job(scenario, 1, "nvidia")
    lines = find_job_log(job_dir).read_text().splitlines()
    steps = [i for i, ln in enumerate(lines) if "completed step:" in ln]
    i = steps[len(steps) // 3]
    warn = lines[i][: lines[i].index("completed step:")] + advisory.format(h=truth["hosts"][1])
    base = triage_log(lines).to_dict()
    triage = triage_log([*lines[: i + 1], warn, *lines[i + 1 :]]).to_dict()
    assert triage["job"] == base["job"]
    result = run_diagnosis(client, triage=triage)
    assert result["diagnosis"]["class"] == scenario
    assert result["diagnosis"]["onset"] == run_diagnosis(client, triage=base)["diagnosis"]["onset"]


_ABSL_HEAD = re.compile(r"^(?:\(\w+ pid=\d+\) )?([IWEF])(\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) \d+ \S+\] ")


def _restyled(lines: list[str], year: int, style: str) -> list[str]:
    """The log as torchrun's `--tee` shows it, the same instants: Python logging's ISO 8601 stamps at UTC+2
    after the rank label (`iso`), or PyTorch's c10 header in brackets after `[rankN]:` (`c10`)."""

    def restyle(ln: str) -> str:
        m = _ABSL_HEAD.match(ln)
        if not m:
            return ln
        if style == "c10":
            return f"[rank0]:[{m[1]}{m[2]}{m[3]} {m[4]}000 ProcessGroupNCCL.cpp:1664] {ln[m.end() :]}"
        t = dt.datetime.fromisoformat(f"{year}-{m[2]}-{m[3]}T{m[4]}+00:00")
        local = t.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
        return f"[default0]:[{local}] {ln[m.end() :]}"

    return [restyle(ln) for ln in lines]


@pytest.mark.parametrize("style", ["iso", "c10"])
@pytest.mark.parametrize("scenario", ["heartbeat-false-positive", "network-hang"])
def test_torchrun_stamped_lines_date_the_log_like_absl_headers(served_job, scenario, style):
    """#10 (corpus D 05, 11, 25): a log whose lines carry ISO 8601 stamps with a UTC offset, or PyTorch's c10
    headers, after torchrun's rank label is dated as well as absl's headers: the same steps, crash time,
    config and verdict."""
    client, truth, job_dir = served_job(scenario, 1, "nvidia")
    lines = find_job_log(job_dir).read_text().splitlines()
    year = int(re.search(r"(20\d\d)\d{4}[-_]\d{6}", "\n".join(lines[:20]))[1])  # type: ignore[index]
    base = triage_log(lines).to_dict()
    styled = _restyled(lines, year, style)
    assert sum(ln.startswith(("[default0]:[", "[rank0]:[")) for ln in styled) > 10
    triage = triage_log(styled).to_dict()
    assert triage["job"] == base["job"] and triage["progress"] == base["progress"]
    assert triage["heartbeat_accused"] == base["heartbeat_accused"] and triage["config"] == base["config"]
    result = run_diagnosis(client, triage=triage)
    assert result["diagnosis"]["class"] == scenario
    assert result["diagnosis"]["onset"] == run_diagnosis(client, triage=base)["diagnosis"]["onset"]


def _mem_ctx(events, rows):
    """A context with host memory (share of the total) per host on a 30 s grid."""
    ctx = _ctx(events)
    t = np.arange(len(next(iter(rows.values())))) * 30.0 + 3000.0
    ctx.results["mem_frac"] = Grid(t, [{"host": h} for h in rows], np.array(list(rows.values()), float))
    return ctx


def test_a_sigkill_where_memory_reached_its_limit_between_two_scrapes_is_an_oom_kill():
    """E21 01: two writers climb ~15 % a scrape; one is seen at 95 %, the other at 94 % before both are
    killed (exit 137) and fall to 5 %. The second reached its limit between the scrapes: both are OOM kills.
    The control: a host killed alike whose memory stayed flat far below its limit is no OOM."""
    climb = [0.25, 0.25, 0.37, 0.51, 0.65, 0.80, 0.942, 0.05, 0.05]
    rows = {"h01": [*climb[:6], 0.951, 0.05, 0.05], "h02": climb, "h03": [0.25] * 7 + [0.05, 0.05]}
    near = _f("memory_exhausted", "host-oom", "info", ["h01"], 3100.0, role="symptom")
    events = [_ev("killed", h, code=137) for h in ("h01", "h02", "h03")]
    d = decide_diagnosis(_mem_ctx(events, rows), [near])
    assert d["class"] == "host-oom" and [c["host"] for c in d["culprits"]] == ["h01", "h02"]


def test_an_oom_kill_known_only_from_the_log_is_dated_at_the_start_of_its_fatal_rise():
    """E22 10, 19: no OOM-kill counter, no sample at the limit, srun's exit 137 lines carry no time. An
    earlier save left memory at 40 %; the fatal save climbs from there between two scrapes past the limit
    and the kill frees it: the onset is where that final rise began (the start of the interval before its
    first higher sample), not the earlier save, and not left empty."""
    flat = [0.25 + 0.003 * (i % 3) for i in range(30)]
    rows = {"h01": [*flat, 0.400, 0.403, 0.401, 0.52, 0.66, 0.80, 0.942, 0.05, 0.05], "h02": [0.25] * 39}
    d = decide_diagnosis(_mem_ctx([_ev("killed", "h01", code=137)], rows), [])
    assert d["class"] == "host-oom" and [c["host"] for c in d["culprits"]] == ["h01"]
    assert d["onset"] == 3000.0 + 33 * 30.0 - 15.0


def test_a_gsp_xid_in_the_log_corroborates_scrape_timeouts_as_a_driver_fault_not_a_hardware_one():
    """Xid 119 (a GSP RPC timeout) is the driver's and its firmware's, as the `xid_driver` rule reads it from
    the metrics: from the log too it is a note on its host that makes the host's GPU exporter timeouts a GPU
    driver fault, never a hardware fault of its own (G2 21 and 22 read gpu-hardware-fault)."""
    stretch = _f("gpu_exporter_slow", "gpu-driver-fault", "warning", ["h04"], 4200.0)
    stretch.extra["needs"] = ("dmesg_gpu_errors", "gpu_metric_gaps", "xid_driver")
    findings = [stretch]
    d = decide_diagnosis(_ctx([_ev("xid", "h04", 4150.0, 119)], stalled=False, last_advance=None), findings)
    assert d["class"] == "gpu-driver-fault" and [c["host"] for c in d["culprits"]] == ["h04"]
    xid = next(f for f in findings if f.rule == "xid_driver")
    assert (xid.klass, xid.severity, xid.hosts, xid.onset) == ("gpu-driver-fault", "info", ["h04"], 4150.0)
    assert not any(f.klass == "gpu-hardware-fault" for f in findings)
