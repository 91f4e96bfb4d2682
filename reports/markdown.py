"""Markdown in every text field: rendered with markdown-it-py (CommonMark + tables, raw HTML off) and
sanitised with nh3, so script, event handlers, `javascript:` links and raw HTML never reach the page."""

from __future__ import annotations

import functools
import re

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)

_TAGS = {
    "p",
    "br",
    "hr",
    "em",
    "strong",
    "del",
    "s",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "span",
}
_ATTRS = {"a": {"href", "title"}, "th": {"style"}, "td": {"style"}, "span": {"class"}, "ol": {"start"}}
_MENTION = re.compile(r"(?<![\w@])@([\w.+-]{1,150})")


def render(text: str) -> SafeString:
    """Return `text` (Markdown) as sanitised HTML, safe to put in a page."""
    text = text or ""
    html = _render_cached(text) if len(text) <= CACHED_CHARS else _render(text)
    return mark_safe(html)  # noqa: S308 - sanitised by _render


#: Texts up to this long are rendered once per process (at most 512 kept, a few MB): a report page shows
#: a few dozen texts (sections, comments, findings) that rarely change between its views, and the HTML
#: depends on the text alone.
CACHED_CHARS = 50_000


def _render(text: str) -> str:
    html = _MD.render(text)
    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRS,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )
    return clean  # nh3 leaves only the allow-listed tags, attributes and schemes


_render_cached = functools.lru_cache(maxsize=512)(_render)


def mentions(text: str) -> list[str]:
    """Return the user names `@name` mentions in `text`, in order, without repeats."""
    seen: dict[str, None] = {}
    for name in _MENTION.findall(text or ""):
        seen.setdefault(name.rstrip(".-"), None)
    return list(seen)
