"""Deleting an investigation (its owner only, after typing its number), from its page."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from investigations.access import get_investigation_or_404
from investigations.models import Investigation
from investigations.services import lifecycle

from ._common import HtmxHttpRequest


@require_POST
def delete(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    # A viewer cannot delete; an editor reaches the service, which lets only the owner do it, and says so.
    investigation = get_investigation_or_404(
        request.user, investigation_id, action="edit", queryset=Investigation.objects.select_related("owner")
    )
    try:
        title = lifecycle.investigation_delete(investigation, request.user, request.POST.get("confirm", ""))
    except lifecycle.DeleteRefused as exc:
        messages.error(request, str(exc))
        response = redirect("investigations:detail", investigation_id=investigation.pk)
        response.status_code = 303
        return response
    messages.success(request, f"Deleted investigation #{investigation_id} “{title}”.")
    response = redirect("investigations:home")
    response.status_code = 303
    return response
