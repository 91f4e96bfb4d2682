from __future__ import annotations

from django import template

from reports import markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str):
    """{{ text|markdown }}: Markdown rendered and sanitised."""
    return markdown.render(text)


@register.simple_tag(takes_context=True)
def shown_sections(context, sections):
    """{% shown_sections sections %}: the sections in show mode, each rendered once per content for all."""
    from reports.fragments import shown_sections as shown

    return shown(context, sections)


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)


@register.filter
def offer_diff(section):
    """The diff from a section's body to the machine's newer text waiting for it."""
    from reports.services.diff import line_diff

    return line_diff(section.body, section.machine_pending) if section.machine_pending else []


@register.filter
def finding_key(finding):
    from reports.services.findings import finding_key as key

    return key(finding)


@register.filter
def utc(ts):
    """Unix seconds as ISO 8601 UTC."""
    from playbooks.report import fmt_time

    try:
        return fmt_time(float(ts)) if ts not in (None, "") else "—"
    except (TypeError, ValueError):
        return "—"


@register.filter
def anchor_id(anchor: str) -> str:
    """The page element id of a comment's anchor: section:<key> -> section-<key>, finding:<key> -> finding-<key>."""
    kind, _, ref = (anchor or "").partition(":")
    return f"{kind}-{ref}" if ref else "report-header"


@register.filter
def strip_queries(text: str) -> str:
    """For the public share page: drop the lines that carry raw PromQL (`Query: ...`)."""
    return "\n".join(line for line in (text or "").splitlines() if not line.lstrip().startswith("Query: `"))
