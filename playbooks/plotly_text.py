"""Text Plotly draws as itself (plain Python).

Plotly renders trace names, hover labels, annotations and titles as a small HTML subset: `<a href>`,
`<b>`, `<br>`, `<span style>` and entities. A host or GPU label read from a TSDB is data, so a label
`<a href=...>` must show those characters, not become a live link. Plotly decodes the entities `&amp;`,
`&lt;` and `&gt;` when it draws, so escaping these three keeps every label exactly as written.
"""

from __future__ import annotations

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def plotly_text(value: object) -> str:
    """Return `value` as text Plotly draws literally (no tag, link or entity of the value takes effect)."""
    return str(value).translate(_ESCAPES)


def hover_literal(value: object) -> str:
    """Return `value` for a hovertemplate: escaped as plotly_text, its `%{` never read as a placeholder."""
    return plotly_text(value).replace("%{", "%\u200b{")
