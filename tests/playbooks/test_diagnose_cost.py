"""What the diagnosis asks Prometheus for (#10, #14): no query whose answer nothing would use."""

from __future__ import annotations

import pytest

from playbooks.diagnose import SourceInfo, plan
from playbooks.loader import PlaybookError, _query
from playbooks.profiles import PROFILES

HOSTS = tuple(f"h{i:02d}" for i in range(16))


def _source(profile: str = "amd") -> SourceInfo:
    names = tuple(sorted({m for s in PROFILES[profile].signals.values() for m in s.metrics}))
    return SourceInfo("http://127.0.0.1:9", profile, names, HOSTS, 8, (0.0, 7200.0))


def _xid(host: str, code: int) -> dict:
    return {"kind": "xid", "host": host, "time": 3600.0, "line": 9, "code": code, "text": "Xid"}


def _queries(triage: dict) -> dict[str, str]:
    return {q.name: q.promql for p in plan(_source(), triage=triage) for q in p.queries}


def test_the_pci_bus_map_is_read_only_for_the_hosts_the_log_reports_a_hardware_xid_on():
    """The PCI-bus map places a log's Xid on its GPU: without a hardware Xid in the log (none, or the
    program's own Xid 13) it is not asked for; with one, only that host's series are read (by its full
    name where the log gives a short one)."""
    assert "gpu_pci" not in _queries({"details": {"host_events": []}})
    assert "gpu_pci" not in _queries({"details": {"host_events": [_xid("h03", 13)]}})
    promql = _queries(
        {"details": {"host_events": [_xid("h03", 79), _xid("h11.cluster.example", 48), _xid("h03", 79)]}}
    )["gpu_pci"]
    assert 'hw_gpu_power_watts{host=~"h03|h11"}' in promql


def test_a_query_names_only_a_known_log_event():
    with pytest.raises(PlaybookError, match="log_hosts"):
        _query({"name": "x", "signal": "gpu_power", "log_hosts": "oom"}, "f.toml")
