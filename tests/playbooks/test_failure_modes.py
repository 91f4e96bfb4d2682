"""The failure modes of issue 10, each reproduced by the generator (seed-dependent variants) and diagnosed
end to end through a served TSDB, plus the decision's weighing of candidates on hand-made findings.

Seeds are chosen for the variant they carry (playbooks/synth/_variants.py draws each from its own stream):
collective-hang 3 hangs before step 0; node-death 4 reports GPU errors before going silent and ends as
Slurm reports a node failure; host-oom 1 climbs a memory staircase; healthy 1 brushes the memory limit
during a save without a kill. Every job carries the RDMA retransmit trickle.
"""

from __future__ import annotations

import pytest

from playbooks.context import Context, Finding, Timeline
from playbooks.decision import decide_diagnosis
from playbooks.diagnose import run_diagnosis
from playbooks.synth import _variants
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def _scrapes(result, truth):
    return abs(result["diagnosis"]["onset"] - truth["onset"]) / truth["interval_s"]


def _alarms(result, classes=None):
    return [
        f
        for f in result["findings"]
        if f["severity"] != "info" and (classes is None or f["class"] in classes)
    ]


NET = {"rdma-degradation", "network-hang"}


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_a_retransmit_trickle_on_every_host_is_not_a_network_event(served_job, profile):
    """Mode 1: a few packets on occasional scrapes of every host: a healthy job stays healthy and quiet."""
    result, truth = _diagnose(served_job, "healthy", 2, profile, nodes=12)
    assert result["diagnosis"]["class"] == "healthy"
    assert _alarms(result) == []


def test_a_clean_collective_hang_with_the_trickle_stays_a_collective_hang(served_job):
    """Mode 1: before a stall, hosts with background retransmits are no 'burst before the hang'."""
    result, truth = _diagnose(served_job, "collective-hang", 1, "nvidia", nodes=12)
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert _alarms(result, NET) == []


def test_a_network_hang_names_only_the_host_where_the_event_stands_out(served_job):
    """Mode 1: among 12 hosts with a trickle, only the host whose retransmits leave it is the culprit."""
    result, truth = _diagnose(served_job, "network-hang", 1, "amd", nodes=12)
    diag = result["diagnosis"]
    assert diag["class"] == "network-hang"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_a_hang_before_the_first_step_is_a_collective_hang_named_by_busy_gpu_sets(served_job, profile):
    """Modes 5 and 6: cancelled before step 0 with 2-3 spinning GPU indices a host; the odd host is named."""
    result, truth = _diagnose(served_job, "collective-hang", 3, profile)
    assert truth["last_step"] is None and "pre_step" in truth["variants"]
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_a_node_that_dies_after_gpu_errors_is_node_death_with_the_errors_as_onset(served_job, profile):
    """Modes 3 and 5: GPU errors, then silence, then Slurm's node failure: node-death from the errors on."""
    result, truth = _diagnose(served_job, "node-death", 4, profile)
    assert truth["onset"] < truth["stall_time"] - 30  # the errors came well before the silence
    diag = result["diagnosis"]
    assert diag["class"] == "node-death"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert _scrapes(result, truth) <= 3
    assert not _alarms(result, {"gpu-hardware-fault"})


def test_staircase_memory_onset_is_the_start_of_the_final_rise(served_job):
    """Mode 2: saves leave memory retained; the onset is the fatal save's rise, not the first step."""
    result, truth = _diagnose(served_job, "host-oom", 1, "amd", hours=2.0)
    diag = result["diagnosis"]
    assert diag["class"] == "host-oom"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_memory_near_the_limit_without_a_kill_is_not_host_oom(served_job, profile):
    """Mode 11: a writer brushes the limit during a save and recovers: a note, not host-oom."""
    result, truth = _diagnose(served_job, "healthy", 1, profile)
    assert truth["red_herrings"].get("near_limit_without_kill")
    assert result["diagnosis"]["class"] == "healthy"
    assert _alarms(result) == []
    assert any(f["class"] == "host-oom" and f["severity"] == "info" for f in result["findings"])


# ------------------------------------------------------------------------------ decision, hand-made findings


class _Source:
    def __init__(self, n):
        self.hosts = tuple(f"h{i:02d}" for i in range(n))


def _ctx(n=16, stalled=False, last_advance=None):
    tl = Timeline(
        start=0.0, end=10_000.0, train_start=100.0, stalled=stalled, last_advance=last_advance, step_s=10.0
    )
    return Context(results={}, meta={}, timeline=tl, triage={"job": {}}, source=_Source(n), gpu=None)


def _f(rule, klass, sev, hosts, onset, **extra):
    return Finding(
        playbook="p",
        rule=rule,
        klass=klass,
        severity=sev,
        role="cause",
        hosts=list(hosts),
        gpus=[],
        onset=onset,
        title=rule,
        evidence=[],
        extra=extra,
    )


def test_an_early_cause_on_a_dozen_hosts_loses_to_a_later_specific_one():
    """Mode 12: 'sustained retransmits' on 10 of 16 hosts from early on are implausible as a cause; a frozen
    exporter on one host later is the diagnosis."""
    many = _f(
        "rdma_retransmits_sustained", "rdma-degradation", "warning", [f"h{i:02d}" for i in range(10)], 500.0
    )
    ghost = _f("ghost_data", "monitoring-ghost-data", "warning", ["h03"], 4000.0)
    d = decide_diagnosis(_ctx(), [many, ghost])
    assert d["class"] == "monitoring-ghost-data"
    assert [c["host"] for c in d["culprits"]] == ["h03"]


def test_a_strong_corroborated_finding_beats_an_earlier_weak_one():
    """Mode 12: of two one-host warnings, the one that stands out 300x with a corroborating ACK-timeout finding
    wins over an earlier one barely past its threshold; onset only breaks ties."""
    weak = _f("gpu_hot", "thermal-straggler", "warning", ["h01"], 1000.0, strength=11.0)
    strong = _f("rdma_retransmits_sustained", "rdma-degradation", "warning", ["h07"], 3000.0, strength=300.0)
    ack = _f("rdma_ack_timeouts_sustained", "rdma-degradation", "warning", ["h07"], 3010.0, strength=50.0)
    d = decide_diagnosis(_ctx(), [weak, strong, ack])
    assert d["class"] == "rdma-degradation"
    assert [c["host"] for c in d["culprits"]] == ["h07"]
    assert d["onset"] == 3000.0


def test_what_starts_after_the_stall_is_an_effect_not_the_cause():
    """Mode 12: a GPU error reported after the steps stopped does not explain the hang."""
    late = _f("ecc_uncorrectable", "gpu-hardware-fault", "critical", ["h05"], 6000.0)
    stall = _f("step_stall", "collective-hang", "critical", [], 5000.0)
    busy = _f("busy_wait", "collective-hang", "critical", [], 5000.0)
    d = decide_diagnosis(_ctx(stalled=True, last_advance=5000.0), [late, stall, busy])
    assert d["class"] == "collective-hang"
    assert d["onset"] == 5000.0


def test_the_variants_are_drawn_from_their_own_streams():
    """The seeds the tests above rely on carry their variants, whatever else the seed decides."""

    class _S:
        def __init__(self, name):
            self.name = name

    class _J:
        def __init__(self, name, seed, opt_in=()):
            self.scenario, self.seed, self.restored_from = _S(name), seed, None
            self.opt_in, self.interval = frozenset(opt_in), 15.0

    assert "pre_step" in _variants.choose(_J("collective-hang", 3))
    assert "errors_before_death" in _variants.choose(_J("node-death", 4))
    assert _variants.choose(_J("node-death", 4))["slurm_node_failure"]
    # an off-by-default variant is drawn only when asked for, and asking changes no other variant
    assert "death_at_end" not in _variants.choose(_J("node-death", 4))
    asked = _variants.choose(_J("node-death", 4, ["death_at_end"]))
    assert 0 < asked.pop("death_at_end") < 2.5 * 15.0
    assert asked == _variants.choose(_J("node-death", 4))
    assert "staircase" in _variants.choose(_J("host-oom", 1))
    assert "near_limit_save" in _variants.choose(_J("healthy", 1))


def test_a_uniform_shift_is_found_when_each_host_background_differs_between_runs():
    """Mode 4 (unit): every host +16 runnable processes, but each host's own background drawn anew per run:
    same-host deltas scatter, the distribution's shift does not."""
    import numpy as np

    from playbooks.shift import distribution_shift

    rng = np.random.default_rng(4)
    base = 10 + rng.uniform(0, 8, 16)
    other = 10 + 16 + rng.uniform(0, 8, 16)
    shift = distribution_shift(base, other)
    assert shift is not None and shift.p < 0.001
    assert shift.low < shift.estimate < shift.high and 12 < shift.estimate < 20 and shift.low > 8
    same = distribution_shift(base, 10 + rng.uniform(0, 8, 16))
    assert same is not None and same.p > 0.01 and same.low < 0 < same.high


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_the_restore_leak_comparison_holds_with_per_host_backgrounds(job_factory, served_job, profile):
    """Mode 4: the generator gives each host its own background per run; the comparison still calls the leak."""
    from playbooks.compare import CompareJob, compare_jobs

    restored, truth = job_factory("restore-resource-leak", 5, profile, nodes=8)
    assert "host_background" in truth["variants"]
    base = restored.with_name(restored.name + "-baseline")
    jobs = [CompareJob(served_job.dir(d), triage_job(d).to_dict()) for d in (base, restored)]
    result = compare_jobs(jobs)
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    procs = next(f for f in result["findings"] if f["class"] == "restore-resource-leak")
    assert any("distribution shifted" in e["interpretation"] for e in procs["evidence"])


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_an_exporter_one_scrape_late_is_no_gap_and_the_gap_onset_is_the_regime(served_job, profile):
    """Mode 7: a host whose exporter comes up late (and the partly filled first window) is no driver fault;
    the driver fault's onset is the start of its recurring gaps, not the start of the data."""
    result, truth = _diagnose(served_job, "healthy", 1, profile)
    assert truth["red_herrings"].get("late_exporter")
    assert not _alarms(result, {"gpu-driver-fault"})
    result, truth = _diagnose(served_job, "gpu-driver-fault", 2, profile)
    assert truth["red_herrings"].get("late_exporter")
    diag = result["diagnosis"]
    assert diag["class"] == "gpu-driver-fault"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert (
        abs(diag["onset"] - truth["onset"]) <= 600
    )  # gaps recur at random scrapes: the first falls within minutes


def _grid(t, rows, hosts=None):
    import numpy as np

    from playbooks.anomaly import Grid

    labels = [{"host": h} for h in hosts] if hosts else [{}]
    return Grid(t=t, labels=labels, values=np.asarray(rows, float).reshape(len(labels), len(t)))


def test_a_lagging_step_gauge_is_no_stall_while_the_gpus_train():
    """Mode 8: the gauge stops an hour before the data ends while GPUs stay at training power and the log's
    steps went on: the most advanced source dates the last step, and there is no stall."""
    import numpy as np

    from playbooks.context import _timeline

    t = np.arange(0.0, 7200.0, 15.0)
    steps = np.where(t < 3600, np.floor(t / 10.0), 359.0)  # the gauge stops at 1 h
    power = np.full((4, len(t)), 700.0) + np.random.default_rng(1).normal(0, 5, (4, len(t)))
    results = {"step": _grid(t, steps), "power_by_host": _grid(t, power, ["a", "b", "c", "d"])}

    class _Src:
        time_range = (0.0, float(t[-1]))

    triage = {"job": {"status": "cancelled"}, "progress": {"last_step_time": 7100.0, "step_time_s": 10.0}}
    tl = _timeline(_Src(), results, triage)
    assert tl.last_advance == 7100.0 and not tl.stalled
    # without the log the gauge alone looks stalled, but the GPUs still train: no stall either
    tl = _timeline(_Src(), results, {"job": {"status": "cancelled"}, "progress": {}})
    assert tl.last_advance < 3700 and not tl.stalled
    # GPUs that drop to busy-wait power after the gauge stopped do make a stall
    power[:, t > 3700] = 250.0
    results["power_by_host"] = _grid(t, power, ["a", "b", "c", "d"])
    assert _timeline(_Src(), results, {"job": {"status": "cancelled"}, "progress": {}}).stalled


def test_range_grids_end_at_the_data_end():
    """Mode 10: fine and coarse grids end exactly at the end of the data, so the last scrape's increment is on
    their last point."""
    from playbooks.diagnose import render_query
    from playbooks.loader import load_playbooks

    gpu = load_playbooks()["gpu_health"]
    for name in ("ecc_ue_host", "temp_gpu"):
        q = render_query(gpu.query(name), "amd", start=1000.0, end=1000.0 + 4 * 3600 + 7, interval=15.0)
        assert q.kind == "range" and q.start <= 1000.0
        n = (q.end - q.start) / q.step
        assert abs(n - round(n)) < 1e-6


def test_a_counter_ticking_steadily_on_every_host_is_no_degradation():
    """Mode 9: InfiniBand transmit waits tick on every host all along (no early steady window to learn a
    baseline from, as in a restored job): the pack's background is that level, not zero. A host that
    leaves it tenfold for minutes is still found."""
    import numpy as np

    from playbooks.detectors import evaluate
    from playbooks.loader import load_playbooks

    t = np.arange(0.0, 3600.0, 15.0)
    rng = np.random.default_rng(9)
    wait = 1.5 + rng.normal(0, 0.2, (8, len(t)))
    hosts = [f"h{i}" for i in range(8)]
    tl = Timeline(start=0.0, end=float(t[-1]), train_start=0.0, step_s=10.0)
    net = load_playbooks()["network"]

    def findings(values):
        ctx = Context(
            results={"rdma_wait": _grid(t, values, hosts)},
            meta={"rdma_wait": {"window_s": 60.0}},
            timeline=tl,
            triage=None,
            source=_Source(8),
            gpu=None,
        )
        return [f for f in evaluate(ctx, [net]) if f.rule == "rdma_transmit_wait_sustained"]

    assert findings(wait) == []
    wait[5, t >= 2000] = 40.0
    found = findings(wait)
    assert [f.hosts for f in found] == [["h5"]]
    assert abs(found[0].onset - 2000) <= 15


def test_a_gpu_error_between_a_silent_hosts_early_onset_and_its_silence_makes_it_a_node_death():
    """Mode 3: a host's own correctable errors dated its silence 5 min early; its Xid 79 came after those
    errors and before the silence. The Xid is judged against when the host fell silent, not against the
    onset the errors moved: the class is node-death, dated by the earliest of them."""
    silent = _f("host_silent", "node-death", "critical", ["h05"], 4700.0, silent_at=5000.0)
    xid = _f("xid_hardware", "gpu-hardware-fault", "critical", ["h05"], 4950.0)
    stall = _f("step_stall", "collective-hang", "critical", [], 5060.0)
    d = decide_diagnosis(_ctx(stalled=True, last_advance=5060.0), [xid, silent, stall])
    assert d["class"] == "node-death"
    assert [c["host"] for c in d["culprits"]] == ["h05"]
    assert d["onset"] == 4700.0
