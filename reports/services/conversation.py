"""Comments (with replies and @mentions), action items, the per-user inbox and presence.

A mention or an assignment puts an item in the user's inbox and, when mail is configured, sends an
e-mail through Django's mail backend (the console backend in the demo).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from reports import markdown
from reports.models import ActionItem, Comment, InboxItem, Presence, Report

from .sections import ReportError

logger = logging.getLogger(__name__)

#: A presence older than this is gone (the page reports every few seconds while open).
PRESENCE_FRESH_S = 15
MAX_COMMENT = 10_000


def _anchor_ok(report: Report, anchor: str) -> bool:
    kind, _, ref = anchor.partition(":")
    if anchor == "report":
        return True
    if kind == "section":
        return report.sections.filter(key=ref).exists()
    if kind == "human":
        return ref.isdigit() and report.human_findings.filter(pk=int(ref)).exists()
    if kind == "finding":
        from .findings import finding_key

        return any(finding_key(f) == ref for f in report.investigation.findings.all())
    return False


def comment_add(report: Report, *, body: str, user, anchor: str = "report", parent_id: Any = None) -> Comment:
    """Add a comment (a reply when `parent_id` is one of this report's comments); mentioned users get an
    inbox item and an e-mail."""
    body = (body or "").strip()
    if not body:
        raise ReportError("The comment is empty.")
    if len(body) > MAX_COMMENT:
        raise ReportError(f"A comment is at most {MAX_COMMENT:,} characters.")
    parent = None
    if parent_id not in (None, ""):
        parent = report.comments.filter(pk=parent_id).first()
        if parent is None:
            raise ReportError("The comment you reply to is gone.")
        anchor = parent.anchor
    if not _anchor_ok(report, anchor):
        raise ReportError("That part of the report does not exist.")
    with transaction.atomic():
        comment = Comment.objects.create(report=report, anchor=anchor, parent=parent, author=user, body=body)
        users = get_user_model().objects.filter(username__in=markdown.mentions(body), is_active=True)
        for mentioned in users.exclude(pk=user.pk):
            _notify(
                mentioned,
                InboxItem.Kind.MENTION,
                report,
                actor=user,
                comment=comment,
                text=f"{user.get_username()} mentioned you on “{report.investigation.title}”: {body[:200]}",
            )
    return comment


def _notify(
    user, kind: str, report: Report, *, actor, text: str, comment=None, action_item=None
) -> InboxItem:
    item = InboxItem.objects.create(
        user=user,
        kind=kind,
        investigation=report.investigation,
        comment=comment,
        action_item=action_item,
        actor=actor,
        text=text[:500],
    )
    if user.email:
        link = reverse("reports:page", args=[report.investigation_id])
        transaction.on_commit(lambda: _mail(user.email, f"[Stepwise] {text[:120]}", f"{text}\n\n{link}\n"))
    return item


def _mail(to: str, subject: str, body: str) -> None:
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [to])
    except OSError as exc:  # an unreachable mail server must not fail the comment
        logger.warning("could not send mail to %s: %s", to, exc)


def inbox_mark_read(user, item_ids: list[Any] | None = None) -> int:
    items = InboxItem.objects.filter(user=user, read=False)
    if item_ids:
        items = items.filter(pk__in=[i for i in item_ids if str(i).isdigit()])
    return items.update(read=True)


def action_item_add(report: Report, *, text: str, owner=None, due: dt.date | None = None, user) -> ActionItem:
    text = (text or "").strip()
    if not text:
        raise ReportError("An action item needs a text.")
    with transaction.atomic():
        item = ActionItem(report=report, text=text[:500], owner=owner, due=due, created_by=user)
        item._change_reason = "added"
        item.save()
        if owner is not None and owner != user:
            _notify(
                owner,
                InboxItem.Kind.ASSIGNMENT,
                report,
                actor=user,
                action_item=item,
                text=f"{user.get_username()} assigned you on “{report.investigation.title}”: {text[:200]}"
                + (f" (due {due:%Y-%m-%d})" if due else ""),
            )
    return item


def action_item_set_done(item: ActionItem, *, done: bool, user) -> ActionItem:
    if item.done != done:
        item.done = done
        item._change_reason = "done" if done else "reopened"
        item._history_user = user
        item.save()
    return item


def presence_touch(report: Report, user, section: str = "") -> None:
    """Record that `user` has the report open now, editing `section` (blank: reading).

    One UPDATE for a reader already present (every page view and every live poll, each few seconds),
    instead of a transaction locking the row first; the row is created on the first visit."""
    values = {"section": section[:32], "seen": timezone.now()}
    if not Presence.objects.filter(report=report, user=user).update(**values):
        Presence.objects.update_or_create(report=report, user=user, defaults=values)


def presence_list(report: Report) -> list[Presence]:
    """Return who had the report open in the last few seconds, and what they edit."""
    fresh = timezone.now() - dt.timedelta(seconds=PRESENCE_FRESH_S)
    return list(report.presence.filter(seen__gte=fresh).select_related("user").order_by("user__username"))


def comments_tree(report: Report) -> dict[str, list[Comment]]:
    """Return {anchor: top-level comments}, each with `.thread` (its replies, oldest first)."""
    comments = list(report.comments.select_related("author"))
    replies: dict[int, list[Comment]] = {}
    for c in comments:
        if c.parent_id:
            replies.setdefault(c.parent_id, []).append(c)
    tree: dict[str, list[Comment]] = {}
    for c in comments:
        if not c.parent_id:
            c.thread = replies.get(c.pk, [])
            tree.setdefault(c.anchor, []).append(c)
    return tree
