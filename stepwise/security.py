"""Browser-facing security headers Django has no setting for, and the CSP violation report endpoint.

- `PermissionsPolicyMiddleware` sends `Permissions-Policy` (settings.STEPWISE_PERMISSIONS_POLICY): no
  camera, microphone, geolocation, payment, USB... for any page of the app or anything it embeds.
- `IdleSessionMiddleware` signs out a session unused for settings.STEPWISE_SESSION_IDLE_SECONDS (the
  last activity is written at most once a minute, so pages polling every second add no write per poll).
- `InvestigationAccessMiddleware` applies the teams and roles (reports.access) to every view of the
  investigations app that names an investigation: one that is not visible to the user is a 404, and a
  change (any method but GET/HEAD/OPTIONS) needs the editor role, else 403. One place, so no view can
  forget it.
- `csp_report` receives the reports browsers send when the Content-Security-Policy (Django's own
  ContentSecurityPolicyMiddleware, settings.SECURE_CSP) blocks something, and logs one line each on the
  `stepwise.csp` logger. It needs no session (a browser sends reports without cookies of a login it
  may not have) and reads at most 16 KB of a report.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

logger = logging.getLogger("stepwise.csp")
log = logging.getLogger(__name__)
_REPORT_MAX = 16 * 1024
_FIELDS = (
    "document-uri",
    "violated-directive",
    "effective-directive",
    "blocked-uri",
    "source-file",
    "line-number",
    "disposition",
)


class PermissionsPolicyMiddleware:
    """Add the Permissions-Policy header to every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        features = getattr(settings, "STEPWISE_PERMISSIONS_POLICY", {})
        self.value = ", ".join(f"{name}=({' '.join(allow)})" for name, allow in features.items())

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.value:
            response.headers.setdefault("Permissions-Policy", self.value)
        return response


class IdleSessionMiddleware:
    """Sign out a signed-in session whose last request is older than STEPWISE_SESSION_IDLE_SECONDS."""

    KEY = "stepwise_last_seen"
    WRITE_EVERY_S = 60.0

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            now = time.time()
            last = request.session.get(self.KEY)
            if isinstance(last, (int, float)) and now - last > settings.STEPWISE_SESSION_IDLE_SECONDS:
                log.info("signing out %s after %.0f s idle", user.get_username(), now - last)
                logout(request)  # LoginRequiredMiddleware then sends the request to the login page
            elif not isinstance(last, (int, float)) or now - last > self.WRITE_EVERY_S:
                request.session[self.KEY] = now
        return self.get_response(request)


class InvestigationAccessMiddleware:
    """Enforce the investigation's team and role on every investigations-app view that names one."""

    SAFE = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Callable, args: tuple, kwargs: dict
    ) -> HttpResponse | None:
        match = getattr(request, "resolver_match", None)
        pk = kwargs.get("investigation_id")
        if match is None or match.app_name != "investigations" or pk is None:
            return None
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None  # LoginRequiredMiddleware sends it to the login page
        from investigations.access import not_visible
        from investigations.models import Investigation
        from reports import access

        investigation = Investigation.objects.filter(pk=pk).first()
        if investigation is None:
            return None  # the view answers 404 itself
        role = access.role_for(user, investigation)
        if role is None:
            raise not_visible(pk)
        if request.method not in self.SAFE and not access.allows(role, "edit"):
            return HttpResponseForbidden("Your role on this investigation does not allow changes.")
        return None


def _one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]


@csrf_exempt
@login_not_required
@require_POST
def csp_report(request: HttpRequest) -> HttpResponse:
    """Log a CSP violation report (`application/csp-report` or the Reporting API's list); answer 204."""
    body = request.read(_REPORT_MAX)
    try:
        data = json.loads(body or b"null")
    except ValueError:
        return HttpResponse(status=400)
    reports = data if isinstance(data, list) else [data]
    for item in reports[:20]:
        if not isinstance(item, dict):
            continue
        report = item.get("csp-report") or item.get("body") or {}
        if not isinstance(report, dict):
            continue
        # The Reporting API names the fields in camelCase; report-uri in kebab-case.
        fields = {k: report.get(k, report.get(_camel(k), "")) for k in _FIELDS}
        logger.warning("CSP violation: %s", " ".join(f"{k}={_one_line(v)!r}" for k, v in fields.items() if v))
    return HttpResponse(status=204)


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(p.title() for p in rest)
