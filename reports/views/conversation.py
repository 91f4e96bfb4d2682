"""Comments and replies, action items, the inbox."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from investigations.views._common import HtmxHttpRequest
from reports import access
from reports.models import ActionItem, InboxItem
from reports.services import conversation as svc
from reports.services.sections import ReportError

from ._common import page_context, report_of


def _region(request, report, role, name: str, error: str = "", status: int = 200) -> HttpResponse:
    if not request.htmx:
        return redirect(f"/investigations/{report.investigation_id}/report/")
    context = page_context(report, role, request.user) | {f"{name}_error": error}
    return render(request, f"reports/report.html#{name}-region", context, status=status)


@require_POST
def comment(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "comment")
    try:
        svc.comment_add(
            report,
            body=request.POST.get("body", ""),
            user=request.user,
            anchor=request.POST.get("anchor", "report"),
            parent_id=request.POST.get("parent"),
        )
    except ReportError as exc:
        return _region(request, report, role, "comments", str(exc), status=400)
    return _region(request, report, role, "comments")


@require_POST
def action_add(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    post = request.POST
    try:
        owner = (
            get_user_model().objects.filter(pk=post["owner"], is_active=True).first()
            if post.get("owner")
            else None
        )
        due = dt.date.fromisoformat(post["due"]) if post.get("due") else None
        svc.action_item_add(report, text=post.get("text", ""), owner=owner, due=due, user=request.user)
    except (ReportError, ValueError) as exc:
        return _region(request, report, role, "actions", str(exc), status=400)
    return _region(request, report, role, "actions")


@require_POST
def action_done(request: HtmxHttpRequest, investigation_id: int, item_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    item = get_object_or_404(ActionItem, pk=item_id, report=report)
    svc.action_item_set_done(item, done=request.POST.get("done") == "1", user=request.user)
    return _region(request, report, role, "actions")


@require_http_methods(["GET", "POST"])
@never_cache
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    """The user's mentions and assignments (only on investigations they can still see); POST marks read."""
    if request.method == "POST":
        svc.inbox_mark_read(request.user, request.POST.getlist("item"))
        return redirect("reports:inbox")
    items = InboxItem.objects.filter(user=request.user).select_related("investigation", "actor", "comment")
    visible = set(access.visible(request.user).values_list("pk", flat=True))
    rows = [i for i in items[:200] if i.investigation_id in visible]
    return render(request, "reports/inbox.html", {"items": rows, "unread": sum(not i.read for i in rows)})


@require_GET
@never_cache
def inbox_count(request: HtmxHttpRequest) -> HttpResponse:
    n = InboxItem.objects.filter(user=request.user, read=False).count()
    return HttpResponse(str(n) if n else "", content_type="text/plain")
