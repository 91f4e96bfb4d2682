"""Markdown in every text field: rendered with markdown-it-py (CommonMark + tables, raw HTML off) and
sanitised with nh3, so script, event handlers, `javascript:` links and raw HTML never reach the page."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable

import nh3
from django.core.cache import cache
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
    """Return `text` (Markdown) as sanitised HTML, safe to put in a page (from the caches when there)."""
    text = text or ""
    if len(text) > CACHED_CHARS:
        return mark_safe(_render(text))  # noqa: S308 - sanitised by _render
    key = _key(text)
    html = _LOCAL.get(key)
    if html is None:  # not warmed (a page that shows one text), or dropped since
        html = warm([text])[key]
    return mark_safe(html)  # noqa: S308 - sanitised by _render (or cached from it under its text's hash)


#: Texts up to this long are cached, under a hash of the text and of this renderer's version (the HTML
#: depends on nothing else, so a new version of a section, comment or note has a new key and shows at
#: once): in this process (about LOCAL_CHARS of HTML, the oldest dropped first) and in the shared cache
#: (Redis in production), which every web process and worker reads, for SHARED_TTL_S after its last write.
CACHED_CHARS = 50_000
LOCAL_CHARS = 8_000_000
SHARED_TTL_S = 7 * 24 * 3600
#: Changes when the rendering or the sanitiser's allow-list changes: the cached HTML of before is not used.
RENDERER = "md1"

_LOCAL: dict[str, str] = {}
_LOCAL_SIZE = [0]
_LOCK = threading.Lock()


def _key(text: str) -> str:
    digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return f"{RENDERER}:{digest}"


def _remember(rendered: dict[str, str]) -> None:
    with _LOCK:
        for key, html in rendered.items():
            if key not in _LOCAL:
                _LOCAL[key] = html
                _LOCAL_SIZE[0] += len(html)
        while _LOCAL_SIZE[0] > LOCAL_CHARS and _LOCAL:
            _LOCAL_SIZE[0] -= len(_LOCAL.pop(next(iter(_LOCAL))))


def warm(texts: Iterable[str]) -> dict[str, str]:
    """Make the coming `render` of each of `texts` a lookup: what this process lacks is read from the
    shared cache in one request, and what that lacks too is rendered and stored there for the others.
    Return {key: HTML} of what this process lacked."""
    wanted = {_key(t): t for t in (x or "" for x in texts) if len(t) <= CACHED_CHARS}
    missing = {f"markdown:{k}": k for k in wanted if k not in _LOCAL}
    if not missing:
        return {}
    found = {missing[k]: html for k, html in cache.get_many(list(missing)).items()}
    rendered = {k: _render(wanted[k]) for k in missing.values() if k not in found}
    if rendered:
        cache.set_many({f"markdown:{k}": html for k, html in rendered.items()}, timeout=SHARED_TTL_S)
    _remember(found | rendered)
    return found | rendered


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


def mentions(text: str) -> list[str]:
    """Return the user names `@name` mentions in `text`, in order, without repeats."""
    seen: dict[str, None] = {}
    for name in _MENTION.findall(text or ""):
        seen.setdefault(name.rstrip(".-"), None)
    return list(seen)
