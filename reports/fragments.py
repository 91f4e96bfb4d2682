"""The report's sections as shown (not edited), rendered once and shared by every web process.

A shown section's HTML follows from what its key hashes, and nothing else: the section's text, version,
title, author and pending machine text, the investigation, whether the reader may edit, whether it is sent
out of band, and the template's own source. A new version (or an offer taken or left) is a new key, so
every reader sees it at once; the old entry is only left to expire.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.core.cache import cache
from django.template import Context
from django.template.loader import get_template
from django.utils.safestring import SafeString, mark_safe

from reports.models import Section

TEMPLATE = "reports/_section.html"
#: How long the shared cache keeps a section's HTML after its last write.
TTL_S = 24 * 3600


def _template() -> Any:
    return get_template(TEMPLATE).template  # type: ignore[attr-defined]  # the engine's own Template


@functools.cache
def _template_digest() -> str:
    """The section template's source (a deploy that changes it changes every key), read once per process."""
    origin = _template().origin.name
    return hashlib.blake2b(Path(origin).read_bytes(), digest_size=8).hexdigest()


def _key(section: Section, flags: tuple[Any, ...]) -> str:
    who = section.updated_by.get_username() if section.updated_by_id and section.updated_by else ""
    parts = (
        _template_digest(),
        *flags,
        section.pk,
        section.key,
        section.title,
        section.version,
        section.edited,
        who,
        section.body,
        section.machine_pending,
    )
    return "report-section:" + hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def shown_sections(context: Context, sections: Iterable[Section]) -> SafeString:
    """Return the sections in show mode, as the page's context renders them: each from the shared cache
    when it holds this very content, else rendered and stored there (all read and written at once)."""
    rows = list(sections or ())
    if not rows:
        return mark_safe("")
    flags = (context["investigation"].pk, bool(context.get("can_edit")), bool(context.get("oob")))
    keys = [_key(s, flags) for s in rows]
    found = cache.get_many(keys)
    template = _template()
    rendered: dict[str, str] = {}
    parts = []
    for section, key in zip(rows, keys, strict=True):
        html = found.get(key)
        if html is None:
            with context.push(section=section, mode="show", note="", error=""):
                html = rendered[key] = template.render(context)
        parts.append(html)
    if rendered:
        cache.set_many(rendered, timeout=TTL_S)
    return mark_safe("".join(parts))  # noqa: S308 - rendered by the autoescaping template above
