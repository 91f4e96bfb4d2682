"""The Markdown exports name hosts and job ids read from a TSDB or a log, which may hold any character:
a name is shown as written and never becomes a heading, a link, an image, raw HTML or an extra table cell."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_it import MarkdownIt

from playbooks.report import diagnosis_markdown, md_name
from playbooks.report_compare import compare_markdown
from reports.markdown import render

pytestmark = pytest.mark.django_db  # the rendered Markdown is cached in the database

HOSTILE = "gpu|7\n# Owned <img src=x onerror=alert(1)> [x](javascript:alert(1)) `tick` *b*"


def _finding(host: str) -> dict[str, Any]:
    return {
        "severity": "critical",
        "title": f"GPU hot on {host}",
        "playbook": "gpu-health",
        "onset": 1_700_000_100.0,
        "evidence": [
            {
                "labels": {"host": host, "gpu": "3\n|x"},
                "value": 91.5,
                "interpretation": f"{host} runs 12 C above the pack",
                "query": 'max by (host) (x{host="a`b|c"})',
            }
        ],
    }


def _diagnosis(host: str) -> dict[str, Any]:
    return {
        "job": {"id": f"job\n## {host}", "triage_class": None, "status": None},
        "source": {
            "time_range": [1_700_000_000.0, 1_700_003_600.0],
            "hosts": [host, "gpu-2"],
            "profile": "nvidia",
        },
        "diagnosis": {
            "class": "thermal-straggler",
            "root_cause_family": "hardware",
            "confidence": 0.8,
            "onset": 1_700_000_100.0,
            "culprits": [{"host": host, "gpu": "3"}],
            "summary": f"One GPU of {host} runs hot.",
            "chain": [f"{host} heats\n# up"],
        },
        "findings": [_finding(host)],
        "timings": {"queries": 3, "prometheus_s": 0.1, "total_s": 0.2},
    }


def _tables_have_their_columns(md: str) -> None:
    """Every table row has as many cells as its header (GFM splits cells on unescaped pipes)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    widths: list[int] = []
    cells = 0
    for t in tokens:
        if t.type in ("th_open", "td_open"):
            cells += 1
        elif t.type == "tr_close":
            widths.append(cells)
            cells = 0
        elif t.type == "table_close":
            assert len(set(widths)) == 1, widths
            widths = []


def _inline_tokens(md: str) -> list[Any]:
    """Every inline token of `md` as a renderer that allows raw HTML (GitHub, a wiki) parses it."""
    out = []
    for t in MarkdownIt("commonmark").enable("table").parse(md):
        out += [t, *(t.children or [])]
    return out


def _no_injected_structure(md: str) -> None:
    tokens = _inline_tokens(md)
    kinds = {t.type for t in tokens}
    assert not kinds & {"image", "html_inline", "html_block"}, kinds
    assert not [t for t in tokens if t.type == "link_open"], "a name opened a link"
    headings = [i for i, t in enumerate(tokens) if t.type == "heading_open"]
    # the names' own "# Owned", "# x" and "# up" after their newline never start a heading
    assert not [
        tokens[i + 1].content for i in headings if tokens[i + 1].content.startswith(("Owned", "x", "up"))
    ]
    assert not any(line.lstrip().startswith(("# ", "## Owned")) for line in md.splitlines())
    html = render(md)  # the app's own renderer and sanitiser
    assert "<img" not in html and "<a " not in html


def test_a_hostile_host_name_stays_text_in_the_diagnosis_export() -> None:
    md = diagnosis_markdown(_diagnosis(HOSTILE))
    _tables_have_their_columns(md)
    _no_injected_structure(md)
    assert md_name(HOSTILE) in md  # the culprit line names it, escaped
    html = render(md)
    assert "gpu|7\\x0a# Owned" in html  # the newline is shown, not obeyed; the pipe kept


def test_a_hostile_host_name_stays_text_in_the_comparison_export() -> None:
    d = _diagnosis(HOSTILE)
    d["jobs"] = [
        {"id": "a|b\n# x", "status": "failed", "first_step": 0, "last_step": 10},
        {"id": "c", "status": "completed", "first_step": 0, "last_step": 12},
    ]
    d["sources"] = [d["source"], d["source"]]
    d["comparison"] = {
        "baseline": 0,
        "config_diff": {"lr`|": [1, 2]},
        "overlap_steps": [0, 10],
        "metrics": [],
    }
    d["timings"] = {"queries": 3, "total_s": 0.2, "prometheus_s": 0.1}
    try:
        md = compare_markdown(d)
    except KeyError as missing:  # the comparison's shape grew: name the key so the fixture follows
        raise AssertionError(f"compare_markdown needs {missing}") from None
    _tables_have_their_columns(md)
    _no_injected_structure(md)


def test_md_name_escapes_every_markdown_character_and_shows_control_characters() -> None:
    assert md_name("a_b*c") == "a\\_b\\*c"
    assert md_name("x\ny") == "x\\\\x0ay"
    assert md_name(None) == "\u2014"
    assert md_name("gpu-238.cluster.internal") == "gpu-238.cluster.internal"
