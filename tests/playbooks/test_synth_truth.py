"""The truth of generated jobs holds when their TSDBs are queried through a real Prometheus."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.synth import SCENARIOS
from tests.conftest import load_truth


def _vec(client, promql: str, at: float) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for s in client.query(promql, at=at)}


def _by(client, promql: str, at: float, label: str) -> dict[str, float]:
    return {s.labels.get(label, ""): s.value for s in client.query(promql, at=at)}


def _window(truth: dict, start: float, end: float) -> str:
    return f"{max(60, int(end - start))}s"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_step_gauge_matches_the_log_and_the_wal_tail_is_served(served_job, scenario):
    """tb_step (real samples) spans exactly the logged steps, and the final WAL-only part is queryable."""
    client, truth, _ = served_job(scenario)
    end = truth["data_range"][1]
    span = _window(truth, truth["job_start"], end)
    real = "tb_step and tb_metrics_plugin_staleness_fill == 0"
    assert client.query(f"max_over_time(({real})[{span}:15s])", at=end)[0].value == truth["last_step"]
    first = client.query(f"min_over_time(({real})[{span}:15s])", at=end)[0].value
    assert first == truth["first_step"]
    # samples after the WAL cut exist: the last hw sample is newer than the tail start
    last_ts = client.query("max(timestamp(hw_gpu_power_watts))", at=end)[0].value
    assert last_ts >= truth["wal_tail_start"]
    hosts = set(client.label_values("host", ["hw_gpu_power_watts"]))
    assert hosts == set(truth["hosts"])


def test_healthy_job_has_only_red_herrings(served_job):
    """A healthy job: only the RDMA retransmit trickle every fabric shows, and one host with high TCP retransmits."""
    client, truth, _ = served_job("healthy")
    start, end = truth["train_start"], truth["job_end"]
    span = _window(truth, start, end)
    retx = _by(client, f"sum by (host) (increase(hw_rdma_tx_retx_pkts_total[{span}]))", end, "host")
    # a few to tens of packets on an occasional scrape: present, yet far below a packet a second
    assert max(retx.values()) > 0
    assert max(retx.values()) < 0.5 * (end - start)
    tick = client.query(f"max(max_over_time(idelta(hw_rdma_tx_retx_pkts_total[1m])[{span}:15s]))", at=end)
    assert 3 <= tick[0].value <= 41
    static = _by(client, "max by (host) (hw_rdma_tx_retx_pkts_total)", end, "host")
    for h in truth["red_herrings"]["large_static_counters"]:
        assert static[h] > 1e4  # large absolute value that did not grow in the window
    tcp = _by(client, f"avg_over_time(rate(hw_tcp_retransmits_total[5m])[{span}:1m])", end, "host")
    noisy = truth["red_herrings"]["high_tcp_clean_rdma_host"]
    assert tcp[noisy] == max(tcp.values()) and tcp[noisy] > 10


def test_thermal_straggler_gpu_is_hottest_and_slowest(served_job):
    """The culprit GPU is the hottest and has the lowest core clock after the onset."""
    client, truth, _ = served_job("thermal-straggler")
    c = truth["culprits"][0]
    end = min(truth["job_end"] - 120, truth["onset"] + 1800)
    temp = _vec(client, "max_over_time(hw_gpu_temperature_celsius[10m])", end)
    hottest = max(temp, key=temp.get)
    assert (dict(hottest)["host"], dict(hottest)["gpu"]) == (c["host"], c["gpu"])
    clock = _vec(client, 'min_over_time(hw_gpu_clock_mhz{type="sclk"}[10m])', end)
    slowest = min(clock, key=clock.get)
    assert (dict(slowest)["host"], dict(slowest)["gpu"]) == (c["host"], c["gpu"])


def test_rdma_degradation_culprits_are_the_retransmitting_hosts(served_job):
    """Exactly the culprit hosts have sustained RDMA retransmits (beyond every host's trickle) and ACK timeouts."""
    client, truth, _ = served_job("rdma-degradation")
    end = truth["job_end"] - 120
    span = _window(truth, truth["onset"], end)
    retx = _by(client, f"sum by (host) (increase(hw_rdma_tx_retx_pkts_total[{span}]))", end, "host")
    seconds = end - truth["onset"]
    bad = {h for h, v in retx.items() if v > 10 * seconds}  # 10/s and more; the trickle is well under 1/s
    assert bad == {c["host"] for c in truth["culprits"]}
    ack = _by(client, f"sum by (host) (increase(hw_rdma_tx_ack_timeout_total[{span}]))", end, "host")
    assert all(ack[h] > 0 for h in bad)


@pytest.mark.parametrize("scenario", ["collective-hang", "network-hang"])
def test_hang_gpus_busy_wait(served_job, scenario):
    """Through the whole hang, not at one instant, the GPUs report high utilisation at near-idle power and
    the step gauge is frozen at the last step."""
    client, truth, _ = served_job(scenario)
    stall = truth["stall_time"]
    end = min(t for t in (truth["crash_time"], truth["job_end"]) if t is not None)
    train_power = [s.value for s in client.query("hw_gpu_power_watts", at=stall - 300)]
    first, last = stall + 600, end - 60
    assert last - first >= 600, "the hang is long enough to be looked at more than once"
    for k in range(5):
        at = first + (last - first) * k / 4
        power = [s.value for s in client.query("hw_gpu_power_watts", at=at)]
        util = [s.value for s in client.query("ray_node_gpus_utilization", at=at)]
        assert sorted(power)[len(power) // 2] < 0.5 * sorted(train_power)[len(train_power) // 2], at
        assert sum(u > 90 for u in util) >= len(util) // 2, at
    span = f"{int(last - stall - 60)}s"
    for fn in ("min_over_time", "max_over_time"):
        assert client.query(f"{fn}(tb_step[{span}])", at=last)[0].value == truth["last_step"], fn
    if scenario == "network-hang":
        before = _by(client, "sum by (host) (rate(hw_rdma_tx_retx_pkts_total[5m]))", stall, "host")
        assert max(before, key=before.get) == truth["culprits"][0]["host"]


def test_node_death_host_goes_silent(served_job):
    """The dead host's exporter stops answering, or its GPUs drop to 0 W, after the onset."""
    client, truth, _ = served_job("node-death")
    host = truth["culprits"][0]["host"]
    at = truth["onset"] + 120
    up = _by(client, 'up{job="node_hw"}', at, "instance")
    power = _by(client, f'max by (host) (hw_gpu_power_watts{{host="{host}"}})', at, "host")
    assert up[f"{host}:9400"] == 0 or power.get(host, 1) == 0


def test_heartbeat_false_positive_accused_hosts_were_training(served_job):
    """At the heartbeat-stop time the accused hosts drew training power."""
    client, truth, _ = served_job("heartbeat-false-positive")
    at = truth["crash_time"] - truth["heartbeat_timeout_s"]
    power = _by(client, "min by (host) (hw_gpu_power_watts)", at, "host")
    idle = _by(client, "min by (host) (hw_gpu_power_watts)", truth["job_end"] - 30, "host")
    for h in truth["accused_hosts"]:
        assert power[h] > 1.8 * idle[h]


def test_host_oom_culprit_exhausts_memory_and_is_killed(served_job):
    """The culprit host's memory nears its total and its OOM-kill counter grows."""
    client, truth, _ = served_job("host-oom")
    host = truth["culprits"][0]["host"]
    end = truth["job_end"]
    span = _window(truth, truth["onset"] - 600, end)
    kills = _by(client, f"increase(hw_oom_kills_total[{span}])", end, "host")
    assert kills[host] >= 0.9 and all(v < 0.5 for h, v in kills.items() if h != host)
    ratio = _by(
        client, f"max_over_time((ray_node_mem_used / ray_node_mem_total)[{span}:15s])", end, "instance"
    )
    assert ratio[f"{host}:55080"] > 0.97


def test_ghost_data_flatlines_one_exporter(served_job):
    """After the onset the ghost host's scrape duration is exactly flat; the others keep moving."""
    client, truth, _ = served_job("monitoring-ghost-data")
    host = truth["culprits"][0]["host"]
    at = min(truth["onset"] + 1500, truth["job_end"] - 60)
    sd = _by(client, "stddev_over_time(hw_scrape_duration_seconds[20m])", at, "host")
    assert sd[host] == 0 and all(v > 0 for h, v in sd.items() if h != host)


def test_driver_fault_host_has_dmesg_errors_and_gaps(served_job):
    """The faulty host logs dmesg GPU errors, times out its scrapes and has gaps in GPU power."""
    client, truth, _ = served_job("gpu-driver-fault")
    host = truth["culprits"][0]["host"]
    end = truth["job_end"] - 60
    span = _window(truth, truth["onset"], end)
    dmesg = _by(client, f"max_over_time(hw_dmesg_gpu_errors_total[{span}])", end, "host")
    assert dmesg[host] > 0 and all(v == 0 for h, v in dmesg.items() if h != host)
    samples = _by(client, f"min by (host) (count_over_time(hw_gpu_power_watts[{span}]))", end, "host")
    assert samples[host] < 0.8 * min(v for h, v in samples.items() if h != host)
    slow = _by(client, f"max_over_time(hw_scrape_duration_seconds[{span}])", end, "host")
    assert slow[host] > 10


def test_hardware_fault_gpu_has_uncorrectable_errors(served_job):
    """Only the culprit GPU's uncorrectable ECC counter grows."""
    client, truth, _ = served_job("gpu-hardware-fault")
    c = truth["culprits"][0]
    end = truth["job_end"]
    grown = [
        dict(k)
        for k, v in _vec(
            client, f"increase(hw_gpu_ras_umc_ue_total[{_window(truth, truth['job_start'], end)}])", end
        ).items()
        if v > 0
    ]
    assert [(g["host"], g["gpu"]) for g in grown] == [(c["host"], c["gpu"])]


def test_training_instability_moves_training_metrics_first(served_job):
    """Grad norm jumps at the onset, before the step time degrades."""
    client, truth, _ = served_job("training-instability")
    real = "and tb_metrics_plugin_staleness_fill == 0"
    on = truth["onset"]
    before = client.query(f"max_over_time((tb_learning_grad_norm {real})[20m:15s])", at=on - 60)[0].value
    after = client.query(f"max_over_time((tb_learning_grad_norm {real})[5m:15s])", at=on + 240)[0].value
    assert after > 3 * before
    st_before = client.query(f"avg_over_time((tb_perf_step_time_seconds {real})[10m:15s])", at=on - 60)[
        0
    ].value
    st_early = client.query(f"avg_over_time((tb_perf_step_time_seconds {real})[2m:15s])", at=on + 120)[
        0
    ].value
    assert st_early < 1.05 * st_before  # the system follows later


def test_restored_job_carries_extra_runnable_threads(served_job):
    """Every host of the restored job runs >10 more runnable processes than in the fresh baseline."""
    client, truth, _ = served_job("restore-resource-leak")
    base = load_truth(Path(truth["compare_with"]))

    def mid(t: dict) -> float:
        return t["train_start"] + 0.7 * (t["job_end"] - t["train_start"])

    restored = _by(client, "avg_over_time(hw_procs_running[5m])", mid(truth), "host")
    fresh = _by(
        served_job.dir(Path(base["job_dir"])), "avg_over_time(hw_procs_running[5m])", mid(base), "host"
    )
    assert set(restored) == set(fresh) == set(truth["hosts"])
    assert all(restored[h] - fresh[h] > 10 for h in restored)


def test_nvidia_profile_uses_dcgm_node_exporter_and_training_gauges(served_job):
    """The NVIDIA profile: DCGM with Hostname/gpu labels, node_exporter by instance, training_* gauges."""
    client, truth, _ = served_job("thermal-straggler", profile="nvidia")
    names = set(client.label_values("__name__"))
    assert {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "node_procs_running",
        "training_step",
        "training_loss",
        "training_step_time_seconds",
        "training_tokens_per_second",
        "training_last_step_timestamp_seconds",
    } <= names
    assert not any(n.startswith(("hw_", "tb_", "ray_")) for n in names)
    assert set(client.label_values("Hostname", ["DCGM_FI_DEV_GPU_TEMP"])) == set(truth["hosts"])
    c = truth["culprits"][0]
    end = min(truth["job_end"] - 120, truth["onset"] + 1800)
    temp = _vec(client, "max_over_time(DCGM_FI_DEV_GPU_TEMP[10m])", end)
    hottest = dict(max(temp, key=temp.get))
    assert (hottest["Hostname"], hottest["gpu"]) == (c["host"], c["gpu"])
    assert (
        client.query("max_over_time(training_step[3h])", at=truth["data_range"][1])[0].value
        == truth["last_step"]
    )


def test_nvidia_hardware_fault_raises_xid(served_job):
    """On NVIDIA the hardware fault shows as Xid 48/79 and double-bit ECC on the culprit GPU."""
    client, truth, _ = served_job("gpu-hardware-fault", profile="nvidia")
    c = truth["culprits"][0]
    xid = [
        dict(k) | {"v": v}
        for k, v in _vec(client, "max_over_time(DCGM_FI_DEV_XID_ERRORS[3h])", truth["job_end"]).items()
        if v > 0
    ]
    assert [(x["Hostname"], x["gpu"]) for x in xid] == [(c["host"], c["gpu"])]
    assert xid[0]["v"] in (48, 79)


def test_data_time_range_of_a_generated_job_matches_its_truth(served_job):
    """The client's real data range works where many metrics share a label set (timestamp() drops names)."""
    client, truth, _ = served_job("healthy")
    first, last = client.data_time_range()
    assert first == pytest.approx(truth["data_range"][0], abs=1)
    assert last == pytest.approx(truth["data_range"][1], abs=1)
