"""Playbook declarations: the shipped ones parse and validate; malformed ones fail with clear errors."""

from __future__ import annotations

import pytest

from playbooks.detectors import DETECTORS
from playbooks.loader import PlaybookError, load_playbooks, parse_playbook, validate_set
from playbooks.model import CLASSES

GOOD = """
name = "demo"
title = "Demo"
trigger = ["always"]
window = { anchor = "crash", before = "30m", after = "5m" }

[[queries]]
name = "power"
signal = "gpu_power"
by = ["host"]
agg = "avg"

[[rules]]
id = "silent"
detector = "host_silent"
queries = ["power"]
class = "node-death"
severity = "critical"
params = { min_duration = "3m" }
"""


def test_shipped_playbooks_load():
    """Every definitions/*.toml parses, and the seven seed playbooks plus exporter health are there."""
    pbs = load_playbooks()
    for name in (
        "hang",
        "heartbeat",
        "host_oom",
        "node",
        "gpu_health",
        "network",
        "training",
        "exporter_health",
    ):
        assert name in pbs
    for pb in pbs.values():
        assert pb.rules
        for rule in pb.rules:
            assert rule.detector in DETECTORS
            assert rule.klass in CLASSES


def test_every_incident_class_has_a_rule():
    """Each class of the contract (but healthy) is produced by at least one rule."""
    produced = {r.klass for pb in load_playbooks().values() for r in pb.rules}
    # network-hang also comes from decide() re-reading an RDMA finding before a stall
    assert set(CLASSES) - {"healthy"} <= produced | {"network-hang"}


def test_good_declaration_parses_into_dataclasses():
    """A small declaration gives frozen dataclasses with parsed durations."""
    pb = parse_playbook(GOOD, source="demo.toml")
    assert pb.name == "demo" and pb.always
    assert pb.window.anchor == "crash" and pb.window.before == 1800.0 and pb.window.after == 300.0
    assert pb.queries[0].signals == ("gpu_power",)
    assert pb.rules[0].params["min_duration"] == "3m"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('detector = "host_silent"', 'detector = "magic"', "unknown detector 'magic'"),
        ('class = "node-death"', 'class = "bad-luck"', "not in the contract's vocabulary"),
        ('queries = ["power"]', 'queries = ["nope"]', "undeclared query nope"),
        ('signal = "gpu_power"', 'signal = "gpu_mood"', "unknown signal 'gpu_mood'"),
        ('severity = "critical"', 'severity = "doom"', "severity must be one of"),
        ('anchor = "crash"', 'anchor = "lunch"', "window.anchor must be"),
        ('before = "30m"', 'before = "half an hour"', "is not a duration"),
        ('trigger = ["always"]', 'trigger = ["sometimes"]', "trigger must list"),
        ('agg = "avg"', 'agg = "median"', "agg must be one of"),
        ('min_duration = "3m"', 'min_duration = "soon"', "is not a duration"),
        ('title = "Demo"', 'title = "Demo"\ncolour = "red"', "unknown key(s) colour"),
        ('name = "power"', 'name = "power"\npromql = "{gpu_power}"', "exactly one of `signal` or `promql`"),
        # a peer query returns the pack and its stand-outs of one per-GPU range query
        ('agg = "avg"', 'agg = "avg"\npeers = "sideways"', "peers is up or down"),
        ('agg = "avg"', 'agg = "avg"\npeers = "up"', "on a range query of a per-GPU signal"),
        # the detector registry: parameters and query roles are checked at load time, naming the rule
        (
            'min_duration = "3m"',
            'min_durration = "3m"',
            "rule 'silent': detector 'host_silent' has no parameter min_durration",
        ),
        (
            'detector = "host_silent"',
            'detector = "busy_wait"',
            "rule 'silent': detector 'busy_wait' reads 2-6 queries",
        ),
        (
            'queries = ["power"]',
            "queries = []",
            "detector 'host_silent' reads 1+ queries",
        ),
        (
            'detector = "host_silent"\nqueries = ["power"]',
            'detector = "step_stall"\nqueries = ["power", "power", "power", "power", "power"]',
            "detector 'step_stall' reads 1-4 queries",
        ),
        (
            'detector = "host_silent"',
            'detector = "series_absent"',
            "detector 'series_absent' reads 0 queries",
        ),
        (
            'params = { min_duration = "3m" }',
            'params = { min_duration = "3m", presence = ["gpu"] }',
            "has no parameter presence",
        ),
    ],
)
def test_bad_declarations_name_the_problem(old, new, message):
    """A malformed declaration raises PlaybookError naming the file and what is wrong."""
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    with pytest.raises(PlaybookError) as err:
        parse_playbook(text, source="demo.toml")
    assert message in str(err.value)
    assert "demo.toml" in str(err.value)


def test_invalid_toml_is_reported():
    """Broken TOML is a PlaybookError, not a crash."""
    with pytest.raises(PlaybookError, match="not valid TOML"):
        parse_playbook("name = ", source="x.toml")


def test_one_query_name_means_one_query():
    """Two playbooks may share a query name only with the same definition (results are shared)."""
    a = parse_playbook(GOOD, source="a.toml")
    b = parse_playbook(
        GOOD.replace('name = "demo"', 'name = "other"').replace('agg = "avg"', 'agg = "max"'), source="b.toml"
    )
    with pytest.raises(PlaybookError, match="differs between playbooks"):
        validate_set({"demo": a, "other": b})


def test_load_from_directory(tmp_path):
    """A directory of declarations loads; a duplicate playbook name is refused."""
    (tmp_path / "a.toml").write_text(GOOD)
    assert list(load_playbooks(tmp_path)) == ["demo"]
    (tmp_path / "b.toml").write_text(GOOD)
    with pytest.raises(PlaybookError, match="declared twice"):
        load_playbooks(tmp_path)


def test_classes_are_declarations_checked_at_load():
    """Families, priorities, causal links and summaries come from classes.toml; a bad one names the class."""
    from playbooks.classes import CLASSES_FILE, ClassError, load_classes, parse_classes

    classes = load_classes()
    assert set(classes) == set(CLASSES)
    assert classes["node-death"].family == "node" and classes["node-death"].stops_job
    assert [c for c, s in classes.items() if s.fallback] == ["collective-hang"]
    text = CLASSES_FILE.read_text()
    for old, new, message in [
        ('family = "node"', 'family = "nodes"', "class 'node-death': family 'nodes'"),
        ("priority = 8", "priority = 80", "priority must be an integer"),
        ('absorbs = ["rdma-degradation"]', 'absorbs = ["rdma"]', "absorbs names unknown class(es) rdma"),
        ("Host {hosts} died", "Host {host} died", "summary names unknown field(s) host"),
    ]:
        assert old in text
        with pytest.raises(ClassError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_classes(text.replace(old, new, 1), source="classes.toml")
    with pytest.raises(ClassError, match="thermal-stragler not in the contract"):
        parse_classes(text.replace("[thermal-straggler]", "[thermal-stragler]"), source="classes.toml")
