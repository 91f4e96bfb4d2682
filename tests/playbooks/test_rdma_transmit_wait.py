"""RDMA degradation where node_exporter's InfiniBand collector is the only network exporter (corpus E, #10
modes 1 and 9): no RoCE retransmit counters, only transmit-wait ticks that every host counts all along, and
no trainer gauges, so only the log knows the steps. Generated jobs served by a real Prometheus.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.log_series import LOG_STEP_QUERY
from playbooks.synth import Exporters
from playbooks.triage import triage_job

#: node_exporter scraped by address, no RoCE hardware counters, no training_* gauges
IB_ONLY = Exporters(node_by_address=True, rdma_hw_counters=False, trainer_gauges=False)


def test_transmit_waits_on_one_host_stand_out_without_any_step_data(served_job):
    """Without a log (nor a step gauge) no host has a history before its change: each is judged against
    the pack's background over the whole data, never against its own whole data, which holds the
    degradation itself."""
    client, truth, _ = served_job("rdma-degradation", 1, "nvidia", exporters=IB_ONLY)
    result = run_diagnosis(client, triage=None)
    waits = [f for f in result["findings"] if f["title"].startswith("Sustained InfiniBand transmit waits")]
    assert waits, [f["title"] for f in result["findings"]]
    assert set(waits[0]["hosts"]) <= {c["host"] for c in truth["culprits"]}


def test_symbol_errors_corroborate_the_degraded_link(served_job):
    """node_exporter's `symbol_error_total` (errors on the port's physical lanes): the degraded host counts
    them, the others none; they name the same host as its transmit waits."""
    ex = Exporters(node_by_address=True, trainer_gauges=False, symbol_errors=True)
    client, truth, job_dir = served_job("rdma-degradation", 1, "nvidia", exporters=ex)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    culprits = {c["host"] for c in truth["culprits"]}
    symbol = [f for f in result["findings"] if f["title"].startswith("InfiniBand symbol errors")]
    assert symbol and set(symbol[0]["hosts"]) <= culprits and symbol[0]["severity"] == "warning"
    assert result["diagnosis"]["class"] == "rdma-degradation"
    assert {c["host"] for c in result["diagnosis"]["culprits"]} == culprits


def test_ack_timeouts_a_textfile_collector_exports_under_the_hw_counter_names_are_read(served_job):
    """A textfile collector beside node_exporter exports the ports' hw_counters files under their own names
    (node_rdma_hw_local_ack_timeout_err_total): the ACK timeouts of the degraded hosts are read from them."""
    ex = Exporters(node_by_address=True, trainer_gauges=False, rdma_textfile=True)
    client, truth, job_dir = served_job("rdma-degradation", 1, "nvidia", exporters=ex)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    acks = [f for f in result["findings"] if f["title"].startswith("Sustained RDMA ACK timeouts")]
    assert acks and set(acks[0]["hosts"]) == {c["host"] for c in truth["culprits"]}


def test_without_a_step_gauge_the_slowdown_comes_from_the_logs_step_times(served_job):
    """No training_* gauges: the step time is the time between the log's timed step lines, so the
    degradation is judged against a real slowdown overlapping it (a step-time finding read from the log)."""
    client, truth, job_dir = served_job("rdma-degradation", 1, "nvidia", exporters=IB_ONLY)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    slow = [f for f in result["findings"] if f["title"].startswith("Step time")]
    assert slow and slow[0]["evidence"][0]["query"] == LOG_STEP_QUERY
    assert slow[0]["onset"] >= truth["onset"] - 900
    assert result["diagnosis"]["class"] == "rdma-degradation"


@pytest.mark.parametrize(
    "names", ["node_infiniband_hw_{}_total", "mlx5_hw_counters_{}", "node_ethtool_{}", "rdma_{}_total"]
)
def test_the_ports_hw_counters_are_read_under_any_prefix(served_job, names):
    """Other collectors export the mlx5 hw_counters files under their own prefix (with or without `_total`):
    the profile names them by their suffix, so the degraded hosts' ACK timeouts are read, their host from
    `instance` through node_uname_info like node_exporter's own, and the retry exhaustion one of them counts
    (RNR NAK retries exceeded) is critical there."""
    ex = Exporters(node_by_address=True, trainer_gauges=False, rdma_textfile=True, rdma_textfile_names=names)
    client, truth, job_dir = served_job("rdma-degradation", 1, "nvidia", exporters=ex)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert "also.rdma_ack_timeouts" in result["source"]["profile"]
    culprits = {c["host"] for c in truth["culprits"]}
    acks = [f for f in result["findings"] if f["title"].startswith("Sustained RDMA ACK timeouts")]
    assert acks and set(acks[0]["hosts"]) == culprits
    exhausted = [f for f in result["findings"] if f["title"].startswith("RDMA retry exhaustion")]
    assert all(set(f["hosts"]) <= culprits for f in exhausted)
    assert result["diagnosis"]["class"] == "rdma-degradation"
    assert {c["host"] for c in result["diagnosis"]["culprits"]} == culprits
