"""The host list of a source (#14): a plain signal's hosts come from the TSDB's index, not from a query
reading every sample of the window, and they are the hosts its PromQL names."""

from __future__ import annotations

import pytest

from playbooks._discovery_sources import _HOST_SIGNALS, _available, source_hosts, window
from playbooks.profiles import PROFILES
from tests.playbooks.test_diagnose_scenarios import _serve


@pytest.mark.parametrize(("profile", "scenario"), [("nvidia", "node-death"), ("amd", "thermal-straggler")])
def test_the_host_list_reads_the_index_and_names_the_hosts_promql_names(
    served_job, view_root, monkeypatch, profile, scenario
):
    client, truth, _ = _serve(served_job, view_root, scenario, 1, profile)
    prof = PROFILES[profile]
    start, end = truth["data_range"]
    win = window((start, end))
    sent: list[tuple[str, str]] = []
    api = client._api

    def logged(path, params, *, query):
        sent.append((path, str(params.get("query", ""))))
        return api(path, params, query=query)

    monkeypatch.setattr(client, "_api", logged)
    hosts = source_hosts(client, prof, win, end)
    monkeypatch.setattr(client, "_api", api)
    names = _available(prof, _HOST_SIGNALS)
    promql = set()
    for name in names:
        expr = f"group by (host) ({prof.signal(name).expr('last_over_time', window=win)})"
        promql |= {s.labels["host"] for s in client.query(expr, at=end) if s.labels.get("host")}
    assert hosts == promql and len(hosts) >= 4  # every node of the job
    read = [q for path, q in sent if path == "/api/v1/query"]
    plain = [n for n in names if not prof.signal(n).host_join]
    assert len(plain) >= 3 and not any(
        prof.signal(n).selector.split("{")[0] in " ".join(read) for n in plain
    ), read
