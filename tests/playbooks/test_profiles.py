"""Metric profiles: every signal of both profiles evaluates on a real TSDB with normalised labels."""

from __future__ import annotations

import pytest

from playbooks.profiles import (
    EVENT_SIGNALS,
    PROFILES,
    SIGNALS,
    ProfileError,
    detect_profile,
    signal_info,
    vendor_mismatch,
)


def _names(client) -> list[str]:
    return client.label_values("__name__")


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_it_recognises_the_profile_from_the_metric_names(served_job, profile):
    """detect_profile picks the exporter family the TSDB was written with."""
    client, _, _ = served_job("healthy", profile=profile)
    assert detect_profile(_names(client)).name == profile


def test_it_refuses_a_tsdb_of_unknown_metrics():
    """A TSDB with none of the anchors is not guessed at."""
    with pytest.raises(ProfileError, match="no known metric profile"):
        detect_profile(["go_goroutines", "process_cpu_seconds_total"])


def test_prefer_overrides_detection_and_unknown_names_are_refused():
    """An explicit profile wins where the TSDB holds it; a misspelt one is a clear error."""
    both = ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "hw_gpu_power_watts"]
    assert detect_profile(both, prefer="amd").name == "amd"
    assert detect_profile(both, prefer="nvidia").name == "nvidia"
    with pytest.raises(ProfileError, match="unknown profile"):
        detect_profile([], prefer="intel")


def test_a_forced_profile_the_tsdb_lacks_is_refused_not_read_as_healthy():
    """Forcing amd on a DCGM-only TSDB would read nothing and call the job healthy: refused, with a hint."""
    with pytest.raises(
        ProfileError, match="holds none of the amd profile's metrics.*nvidia profile's: use auto"
    ):
        detect_profile(["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"], prefer="amd")


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_every_signal_yields_normalised_labels_on_real_data(served_job, profile):
    """Each signal's PromQL runs and gives one series per host/GPU with exactly the scope's labels (an event
    signal only where its event holds: none on a healthy job)."""
    client, truth, _ = served_job("healthy", profile=profile)
    prof = PROFILES[profile]
    available = prof.available(_names(client))
    start, end = truth["data_range"]
    at = start + 0.6 * (end - start)
    hosts = set(truth["hosts"])
    for name, sig in prof.signals.items():
        if not available[name]:
            continue
        samples = client.query(sig.expr(window="5m"), at=at)
        for s in samples:
            assert set(s.labels) == set(sig.labels), (name, s.labels)
        if name in EVENT_SIGNALS:
            assert samples == [], (name, samples)
            continue
        assert samples, f"{profile}:{name} returned nothing: {sig.expr()}"
        if sig.scope == "host":
            assert {s.labels["host"] for s in samples} == hosts, name
        elif sig.scope == "gpu":
            assert len(samples) == len(hosts) * truth["gpus_per_host"], name
            assert {s.labels["host"] for s in samples} == hosts, name
        else:
            assert len(samples) == 1, name


def test_units_are_normalised_across_profiles(served_job):
    """VRAM is bytes and I/O pressure a percentage in both profiles, whatever the exporter's own unit."""
    values = {}
    for profile in ("amd", "nvidia"):
        client, truth, _ = served_job("healthy", profile=profile)
        start, end = truth["data_range"]
        at = start + 0.6 * (end - start)
        prof = PROFILES[profile]
        total = client.query(prof.expr("gpu_vram_total", by=(), agg="max"), at=at)[0].value
        io = client.query(prof.expr("io_pressure", by=(), agg="max"), at=at)[0].value
        values[profile] = (total, io)
        assert 16 * 2**30 <= total <= 512 * 2**30, (profile, total)
        assert 0 <= io <= 100, (profile, io)


def test_missing_signals_are_reported_not_guessed():
    """node_exporter has no RDMA retry-exhaustion counter and the profile says so; asking for it names the gap."""
    nvidia = PROFILES["nvidia"]
    assert "rdma_retry_exceeded" in nvidia.unavailable()
    assert "gpu_xid" in PROFILES["amd"].unavailable()
    with pytest.raises(ProfileError, match="nvidia profile has no rdma_retry_exceeded"):
        nvidia.expr("rdma_retry_exceeded")
    assert set(nvidia.unavailable(["DCGM_FI_DEV_POWER_USAGE"])) >= {"gpu_temp", "loss"}


def test_counters_only_take_counter_functions_and_are_rated():
    """A counter is never used raw: rate by default, gauge-only functions refused."""
    sig = PROFILES["amd"].signal("rdma_retransmits")
    assert sig.expr() == "sum by (host) (rate(hw_rdma_tx_retx_pkts_total[5m]))"
    assert "increase(" in sig.expr("increase", window="1h")
    with pytest.raises(ProfileError, match="is a counter"):
        sig.expr("max_over_time")
    with pytest.raises(ProfileError, match="is a gauge"):
        PROFILES["amd"].signal("gpu_power").expr("rate")


def test_training_signals_drop_staleness_fills():
    """Seed-system training gauges filter the repeated samples the TensorBoard bridge writes."""
    expr = PROFILES["amd"].expr("step_time")
    assert "unless on() (tb_metrics_plugin_staleness_fill == 1)" in expr


def test_signal_catalogue_is_consistent():
    """Every signal of every profile is in the catalogue with a domain, scope and kind."""
    for prof in PROFILES.values():
        for name in prof.signals:
            info = signal_info(name)
            assert info["domain"] and info["scope"] in {"gpu", "host", "job"}
    assert len(SIGNALS) == len(set(SIGNALS))


def test_a_gpu_model_of_another_vendor_than_the_exporters_is_named():
    assert "H100 is an NVIDIA GPU but this job's exporters are AMD's (amd profile)" in vendor_mismatch(
        "H100", "amd"
    )
    assert vendor_mismatch("MI355X", "amd") == "" and vendor_mismatch("H100", "nvidia") == ""
    assert vendor_mismatch("V100", "amd") == "" and vendor_mismatch("H100", "intel") == ""


def test_nodes_on_two_dcgm_releases_and_a_custom_counter_set_meet_under_one_host_label(tmp_path):
    """One node's exporter says `Hostname` (a release), another's `hostname` (HEAD); neither exports
    DCGM_FI_DEV_GPU_TEMP (a custom counter CSV): the profile is fitted from what is there."""
    import time

    from playbooks.profiles import resolve_profile
    from playbooks.prometheus import PrometheusClient
    from tests.support.prometheus import Family, build_tsdb, points, served, write_openmetrics

    end = time.time() - 3600
    start = end - 900
    power = Family(
        "DCGM_FI_DEV_POWER_USAGE",
        series=[
            (
                {"Hostname": "gpu-a", "gpu": str(g), "instance": "10.0.0.1:9400", "job": "gpu-metrics"},
                points(start, end, 15.0, lambda t: 300.0),
            )
            for g in range(2)
        ]
        + [
            (
                {"hostname": "gpu-b", "gpu": str(g), "instance": "10.0.0.2:9400", "job": "gpu-metrics"},
                points(start, end, 15.0, lambda t: 310.0),
            )
            for g in range(2)
        ],
    )
    tsdb = build_tsdb(write_openmetrics(tmp_path / "m.om", [power]), tmp_path / "tsdb")
    with served(tsdb, tmp_path / "views") as server, PrometheusClient(server.url, retries=1) as client:
        prof = resolve_profile(client, client.label_values("__name__"))
        got = client.query(prof.expr("gpu_power"), at=end - 30)
    assert prof.base == "nvidia" and "dcgm.host=Hostname%2Chostname" in prof.name
    assert sorted((s.labels["host"], s.labels["gpu"]) for s in got) == [
        ("gpu-a", "0"),
        ("gpu-a", "1"),
        ("gpu-b", "0"),
        ("gpu-b", "1"),
    ]
