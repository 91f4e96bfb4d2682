"""Metric profiles are TOML declarations: checked when loaded, and a team's own folder is recognised by auto."""

from __future__ import annotations

import re
import time

import pytest

from playbooks.discovery import discover
from playbooks.profiles import PROFILES, ProfileError, detect_profile, load_profile_specs, parse_spec
from playbooks.profiles._declared import load_specs
from playbooks.prometheus import PrometheusClient
from tests.support.prometheus import Family, build_tsdb, points, served, write_openmetrics

TEAM = """
name = "team-trainer"
title = "Our PyTorch trainer + node_exporter"
anchors = ["train_loss"]
include = ["node_exporter"]

[exporters.trainer]
anchor = "train_loss"
scope = "job"

[signals]
step = { exporter = "trainer", metric = "train_global_step" }
loss = { exporter = "trainer", metric = "train_loss" }
dataloader_wait = { exporter = "trainer", metric = "train_dataloader_wait_seconds" }
checkpoint_save_time = { exporter = "trainer", metric = "train_checkpoint_save_seconds" }
restarts = { exporter = "trainer", metric = "train_restarts_total" }
heartbeat_age = { exporter = "trainer", metric = "train_rank_heartbeat_age_seconds", agg = "max" }
"""


@pytest.fixture
def team_dir(tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "team.toml").write_text(TEAM)
    monkeypatch.setenv("STEPWISE_PROFILE_DIRS", str(folder))
    return folder


def test_the_builtin_declarations_load():
    specs = load_profile_specs()
    assert {"amd", "nvidia", "amd-dme", "node"} <= set(specs)
    assert all(s.source.endswith(".toml") for s in specs.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\nanchors = ["a"]\ncolour = 1\n', "top level: unknown key(s) colour"),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_powr = { exporter = "e", metric = "a" }\n',
            "signal gpu_powr: unknown signal (did you mean gpu_power",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\nhost_label = ["h"]\n',
            "exporter e: unknown key(s) host_label",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\noom_kills = { exporter = "e", metric = "a", expr = "a * 2" }\n',
            "signal oom_kills: expr is for gauges only",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_power = { exporter = "e", metric = "a", agg = "median" }\n',
            "signal gpu_power: agg must be one of",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_power = { exporter = "e", metric = "a-b" }\n',
            "not a valid name: a-b",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_util = { exporter = "e", metrics = ["a", "b"], scales = [1.0] }\n',
            "signal gpu_util: scales needs a gauge's metrics",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_power = { exporter = "e", suffixes = ["power_w"] }\n',
            "signal gpu_power: suffixes name a counter's metrics",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\nrdma_cnp = { exporter = "e", suffixes = ["cnp.*"] }\n',
            "signal rdma_cnp.suffixes: not a valid name: cnp.*",
        ),
        (
            'name = "x"\nanchors = ["a"]\n[exporters.e]\nanchor = "a"\n[signals]\ngpu_power = { exporter = "e", metric = "a", fallback = ["b"] }\n',
            "signal gpu_power: fallback names a counter's metrics",
        ),
        ('name = "x"\n[exporters.e]\nanchor = "a"\n', "anchors: a profile needs at least one anchor"),
        ('name = "x"\nanchors = ["a"\n', "not valid TOML"),
    ],
)
def test_a_malformed_declaration_is_refused_naming_the_file_and_item(text, message):
    with pytest.raises(ProfileError, match=re.escape(message)) as err:
        parse_spec(text, "team.toml")
    assert str(err.value).startswith("team.toml: ")


def test_a_counters_suffixes_name_its_metrics_under_any_prefix_but_its_own():
    """`suffixes` match a whole `_`-separated tail, with or without `_total`, never the declared metrics."""
    from playbooks.profiles._resolve import suffix_matches

    sig = load_profile_specs()["nvidia"].signals["rdma_ack_timeouts"]
    present = {
        "node_infiniband_local_ack_timeout_errors_total",  # node_exporter's own name: declared
        "node_rdma_hw_local_ack_timeout_err_total",
        "mlx5_hw_counters_local_ack_timeout_err",
        "local_ack_timeout_err",
        "xlocal_ack_timeout_err",
        "node_rdma_hw_local_ack_timeout_err_rate",
    }
    assert suffix_matches(sig, present, sig.metrics) == [
        "local_ack_timeout_err",
        "mlx5_hw_counters_local_ack_timeout_err",
        "node_rdma_hw_local_ack_timeout_err_total",
    ]


def test_cross_references_are_checked_when_merged(tmp_path):
    (tmp_path / "a.toml").write_text(
        'name = "a"\nanchors = ["m"]\n[exporters.e]\nanchor = "m"\n'
        '[signals]\ngpu_power = { exporter = "nope", metric = "m" }\n'
    )
    with pytest.raises(ProfileError, match=r"a\.toml: signal gpu_power: unknown exporter 'nope'"):
        load_specs([tmp_path])
    (tmp_path / "a.toml").write_text(
        'name = "a"\nanchors = ["m"]\n[exporters.e]\nanchor = "m"\nscope = "job"\n'
        '[signals]\ngpu_power = { exporter = "e", metric = "m" }\n'
    )
    with pytest.raises(ProfileError, match="a gpu-scope signal cannot come from the job-scope exporter e"):
        load_specs([tmp_path])
    (tmp_path / "a.toml").write_text('name = "nvidia"\nanchors = ["m"]\ninclude = ["training"]\n')
    with pytest.raises(ProfileError, match="no fragment 'training'"):
        load_specs([tmp_path])


def test_a_team_profile_shadowing_a_builtin_name_is_refused(tmp_path, monkeypatch):
    (tmp_path / "n.toml").write_text('name = "nvidia"\nanchors = ["m"]\ninclude = ["node_exporter"]\n')
    monkeypatch.setenv("STEPWISE_PROFILE_DIRS", str(tmp_path))
    with pytest.raises(ProfileError, match="profile 'nvidia' is already declared in"):
        load_profile_specs()


def test_a_team_profile_is_recognised_by_auto_and_read_through_a_real_prometheus(team_dir, tmp_path):
    """The trainer's own names (no Python): auto picks the team's profile; its signals read real series."""
    end = time.time() - 3600
    start = end - 1800
    host = {"instance": "10.1.0.7:9100", "job": "node-exporter"}
    fams = [
        Family(
            "train_loss",
            series=[
                (
                    {"instance": "10.1.0.7:8000", "job": "trainer"},
                    points(start, end, 15.0, lambda t: 2.0 - (t - start) / 1800),
                )
            ],
        ),
        Family(
            "train_global_step",
            series=[
                (
                    {"instance": "10.1.0.7:8000", "job": "trainer"},
                    points(start, end, 15.0, lambda t: (t - start) // 10),
                )
            ],
        ),
        Family(
            "train_rank_heartbeat_age_seconds",
            series=[
                (
                    {"instance": "10.1.0.7:8000", "job": "trainer", "rank": str(r)},
                    points(start, end, 15.0, lambda t, r=r: 1.0 + r),
                )
                for r in range(4)
            ],
        ),
        Family(
            "node_uname_info",
            series=[(host | {"nodename": "trn-a07"}, points(start, end, 15.0, lambda t: 1.0))],
        ),
        Family("node_procs_running", series=[(host, points(start, end, 15.0, lambda t: 9.0))]),
        Family("up", series=[(host, points(start, end, 15.0, lambda t: 1.0))]),
    ]
    names = {f.name for f in fams}
    assert detect_profile(names).name == "team-trainer"
    tsdb = build_tsdb(write_openmetrics(tmp_path / "m.om", fams), tmp_path / "tsdb")
    with served(tsdb, tmp_path / "views") as server, PrometheusClient(server.url, retries=1) as client:
        found = discover(client)
        prof = PROFILES[found.profile]
        at = end - 60
        age = client.query(prof.expr("heartbeat_age"), at=at)
        loss = client.query(prof.expr("loss"), at=at)
    assert found.profile.partition("@")[0] == "team-trainer"
    assert found.hosts == ("trn-a07",), "node_exporter scraped by address is named through node_uname_info"
    assert [s.value for s in age] == [4.0] and loss and loss[0].value < 1.1
    assert "gpu_power" in dict(found.unavailable)


def test_without_the_folder_the_team_profile_is_unknown(monkeypatch):
    monkeypatch.delenv("STEPWISE_PROFILE_DIRS", raising=False)
    assert "team-trainer" not in PROFILES
    assert detect_profile({"train_loss", "node_procs_running", "node_uname_info"}).name == "node"
