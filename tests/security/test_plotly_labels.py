"""Item 5 (first half): every label Plotly draws is escaped, so a TSDB label is shown, never rendered.

Plotly draws names, hover text, annotations and titles as an HTML subset (`<a href>`, `<b>`, `<br>`);
a host label `<a href=...>` read from a TSDB was a live link in the legend. The browser side (Plotly in
Chromium drawing the escaped text literally) is tests/browser/test_csp.py.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from playbooks import timeline as tl
from playbooks.plotly_text import hover_literal, plotly_text
from tests.playbooks.timeline_support import END, START, CannedClient
from tests.playbooks.timeline_support import make_ctx as _ctx
from tests.playbooks.timeline_support import make_gpu as _gpu

HOSTILE = '<a href="https://evil.example/">click</a><b>bold</b><br>&lt;x&gt;'


@given(st.text())
def test_escaped_text_has_no_markup_and_decodes_to_itself(text: str) -> None:
    out = plotly_text(text)
    assert "<" not in out and ">" not in out
    # Plotly decodes exactly &amp; &lt; &gt; (and numeric entities): decoding those gives the label back.
    assert out.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == text


@given(st.text())
def test_hover_text_never_opens_a_placeholder(text: str) -> None:
    assert "%{" not in hover_literal(text)


def test_a_hostile_host_label_is_escaped_in_names_hover_and_outliers() -> None:
    series = [_gpu(f"h{i}", g, 60 + g) for i in range(2) for g in range(4)]
    series.append(_gpu(HOSTILE, 1, 61, bump=25))
    (panel,) = tl.panels_fetch(CannedClient(lambda q: series), _ctx(gpus=9), ["gpu_temp"], START, END)
    fig = tl.figure_build(panel, _ctx(gpus=9))
    drawn = [d for d in fig["data"] if HOSTILE.split(">")[0][1:] in d["name"].replace("&lt;", "<")]
    assert drawn, "the hostile host's trace is drawn"
    for trace in fig["data"]:
        assert "<a" not in trace["name"] and "<b>" not in trace["name"] and "<br>" not in trace["name"]
        assert "<a" not in trace["hovertemplate"]
    assert plotly_text(HOSTILE) in drawn[0]["name"]
    # The raw label stays in the meta the page's own code reads (as text, never as HTML).
    assert drawn[0]["meta"]["host"] == HOSTILE
