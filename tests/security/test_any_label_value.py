"""Item 15: any label value a TSDB can hold renders. A non-numeric `gpu` label made the timeline (and Pin)
answer 500; a host name outside [A-Za-z0-9-_.] made a finding's "Open on the timeline" link a 400.
Property test: any such value survives the PromQL the timeline writes, checked by a real Prometheus."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from investigations.services.timeline_view import TimelineViewError, timeline_view_parse
from playbooks import timeline as tl
from playbooks.timeline.promql import _escape, _label_vector
from tests.playbooks.timeline_support import END, START, TIMES, CannedClient
from tests.playbooks.timeline_support import make_ctx as _ctx
from tests.playbooks.timeline_support import make_series as _series

ODD_HOSTS = ["gpu node#1 (rack 2)", "nœud-é/ü", 'a"b\\c$1', "<a href=x>h</a>", "host:9100"]
ODD_GPUS = ["GPU-1f2e3d4c-0000-1111", "0", "10", "2", "nvidia3", ""]


def test_non_numeric_gpu_labels_and_odd_hosts_draw() -> None:
    series = [_series({"host": h, "gpu": g}, [60.0 + i] * len(TIMES)) for i, (h, g) in
              enumerate((h, g) for h in ODD_HOSTS[:2] for g in ODD_GPUS)]  # fmt: skip
    (panel,) = tl.panels_fetch(CannedClient(lambda q: series), _ctx(gpus=12), ["gpu_temp"], START, END)
    figure = tl.figure_build(panel, _ctx(gpus=12))
    drawn = [(d["meta"].get("host"), d["meta"].get("gpu")) for d in figure["data"]]
    assert len(drawn) == len(series)
    gpus = [g for h, g in drawn if h == ODD_HOSTS[0]]
    assert gpus[:4] == ["0", "2", "10", ""] or gpus[:3] == ["0", "2", "10"]  # numbers in numeric order first


@pytest.mark.parametrize("host", ODD_HOSTS)
def test_a_timeline_link_takes_any_host_label(host: str) -> None:
    assert timeline_view_parse({"hosts": host}).hosts == (host,)


@pytest.mark.parametrize("host", ["a\x00b", "line\nbreak", "x" * 300])
def test_control_characters_and_absurd_lengths_are_refused(host: str) -> None:
    with pytest.raises(TimelineViewError, match="Not a host name"):
        timeline_view_parse({"hosts": host})


_LABEL_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_LABEL_TEXT)
def test_any_label_value_survives_the_promql_a_real_prometheus_reads(served_job, value: str) -> None:
    client, _truth, _dir = served_job("healthy")
    (sample,) = client.query(f'label_replace(vector(1), "host", "{_escape(value)}", "", "")')
    assert sample.labels["host"] == value
    (kept,) = client.query(f"({_label_vector([{'host': value}])})")
    assert kept.labels.get("host") == value
