"""Heartbeat false positives and odd-host collective hangs as the blind corpus E showed them (#10), each
reproduced by the generator and diagnosed end to end through a served TSDB.

- The program prints the JAX heartbeat timeout itself (`jax.distributed heartbeat_timeout_seconds=N`, not a
  `Config param` line), or states none (JAX's default of 100 s applies): the heartbeat-stop time is still
  known, the accused hosts are seen training up to the kill, and the steps stopping at the kill are its
  effect, not a hang.
- PyTorch's NCCL heartbeat monitor killing a rank (a PyTorch trainer's log) is read as JAX's coordinator is.
- A burst of RDMA retransmits on an accused host minutes before the heartbeats stopped, the job training on
  until the kill, triggered no hang (the steps never stopped before the kill): still a heartbeat false
  positive, the burst a side note.
- A real hang the coordinator then reports as a heartbeat timeout (the hang blocked the heartbeats too) is
  still a hang: the steps stopped, or never started, long before the kill. Before the first step, the spin
  that the kill cut short (2-6 min) is the hang's whole pattern.
- A hang whose ranks a collective watchdog killed long before the data ends still names its odd host.
- A spinning GPU's sampled utilisation that scatters (40-100 %) is still spinning: its host's set is the
  common one, and the odd host (idle GPUs at 0 %) is still the only one named.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


@pytest.mark.parametrize(("variant", "seed"), [("hb_printed", 1), ("hb_default", 2)])
def test_a_heartbeat_timeout_printed_by_the_program_or_left_at_its_default_dates_the_stop(
    served_job, variant, seed
):
    result, truth = _diagnose(
        served_job, "heartbeat-false-positive", seed, "amd", nodes=6, variants=(variant,)
    )
    if variant == "hb_default":
        assert truth["heartbeat_timeout_s"] == 100
    _assert_false_positive(result, truth)


@pytest.mark.parametrize("fmt", ["srun-nemo", "kubectl-titan"])
def test_pytorchs_nccl_heartbeat_monitor_kill_of_a_training_rank_is_a_false_positive(served_job, fmt):
    """A PyTorch trainer killed by its NCCL heartbeat monitor (`Heartbeat monitor timed out!`, the watchdog
    'stuck for N seconds') while the accused node trained with its peers: its timeout dates the stop."""
    result, truth = _diagnose(served_job, "heartbeat-false-positive", 1, "nvidia", nodes=6, log_format=fmt)
    _assert_false_positive(result, truth)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_network_blip_before_a_heartbeat_false_positive_is_no_hang_trigger(served_job, seed):
    """Seeds 1 and 2 were network-hang on the accused host with the burst."""
    result, truth = _diagnose(served_job, "heartbeat-false-positive", seed, "amd", variants=("hb_net_blip",))
    diag = result["diagnosis"]
    assert diag["class"] == "heartbeat-false-positive", diag["summary"]
    assert diag["culprits"] == []
    assert abs(diag["onset"] - (truth["crash_time"] - truth["heartbeat_timeout_s"])) <= truth["interval_s"]
    blip = [f for f in result["findings"] if f["title"].startswith("RDMA retransmit burst")]
    assert blip and set(blip[0]["hosts"]) <= set(truth["accused_hosts"]), "the burst is still reported"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_hang_killed_by_its_watchdog_long_before_the_data_ends_still_names_the_odd_host(served_job, seed):
    """The ranks are killed 10-20 min into the hang and every GPU then idles for the rest of the capture,
    with no dated end in the log: the spinning pattern is read where the GPUs spun, so the host whose GPUs
    partly stayed idle is still the one whose set differs (it was lost when the idle tail was counted)."""
    result, truth = _diagnose(served_job, "collective-hang", seed, "nvidia", variants=("watchdog_kill",))
    assert truth["culprits"], "the seed draws a host with GPUs that never entered the collective"
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= 3


@pytest.mark.parametrize("seed", [6, 7, 2, 4])
def test_a_hang_that_the_coordinator_reports_as_a_heartbeat_timeout_is_a_hang(served_job, seed):
    """Seeds 6 and 7 hang before the first step and are killed 2 and 6 minutes later (were heartbeat false
    positives: the accused spun with their peers); seeds 2 and 4 hang mid-run, the heartbeats stopping just
    before (2) or after (4) the stall."""
    result, truth = _diagnose(served_job, "collective-hang", seed, "amd", variants=("heartbeat_kill",))
    assert truth["accused_hosts"]
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang", diag["summary"]
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= 3


@pytest.mark.parametrize(
    ("seed", "interval", "variants"),
    [(1, 15.0, ("noisy_spin",)), (5, 15.0, ("noisy_spin",)), (1, 30.0, ("noisy_spin", "watchdog_kill"))],
)
def test_a_spin_whose_utilisation_scatters_keeps_the_common_set(served_job, seed, interval, variants):
    """8 hosts x 8 GPUs. Seed 1 (odd host) and 5 (uniform deadlock): the odd host was lost (every host's set
    drawn at random from its scattered samples). Seed 1 at 30 s, killed 12 min in (11 coarse samples of the
    spin): judged by the median of its samples, one spinning GPU of another host fell below the line and
    named a second host; by their mean, none."""
    result, truth = _diagnose(
        served_job, "collective-hang", seed, "nvidia", nodes=8, gpus=8, interval=interval, variants=variants
    )
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


def test_one_trickle_tick_before_a_hang_is_no_network_trigger(served_job):
    """Seed 8 (4 hosts, 15 s scrapes, rate over 60 s) was network-hang on node0011 and node0013: each counted
    one scrape's tick of the background trickle (38 packets on one NIC) shortly before the stall, which rate()
    spread over its window into four points of 0.63/s; no host had counted any before, so the background was
    0/s and the tick was "sustained for 1 min, 1x the background". One increment, which lifts rate() for its
    window and no longer, with no other counter of the link (ACK timeouts, retry exhaustion, link errors,
    ports) rising on the host at the time, is no network event: the hang is a clean collective hang, with no
    culprit."""
    result, truth = _diagnose(served_job, "collective-hang", 8, "amd", variants=("heartbeat_kill",))
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang", diag["summary"]
    assert diag["culprits"] == [] == truth["culprits"]
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= 3
    assert not [f for f in result["findings"] if f["title"].startswith("RDMA retransmit burst")]
    said = [e["interpretation"] for f in result["findings"] for e in f["evidence"]]
    assert not [s for s in said if " 1x the background" in s or " 0x the background" in s]


def _assert_false_positive(result, truth) -> None:
    """A heartbeat false positive: no culprit, onset = kill - timeout, the accused hosts named as training."""
    diag = result["diagnosis"]
    assert diag["class"] == "heartbeat-false-positive", diag["summary"]
    assert diag["culprits"] == []
    assert abs(diag["onset"] - (truth["crash_time"] - truth["heartbeat_timeout_s"])) <= truth["interval_s"]
    accused = next(f for f in result["findings"] if f["title"].startswith("Accused hosts were training"))
    assert set(accused["hosts"]) == set(truth["accused_hosts"])
