"""A machine at its cap of served TSDB copies answers "busy, try again in a moment", never a 500.

`SourceBusyMiddleware` turns `investigations.services.SourceBusy` raised by any view (the timeline's
region, panels and pins serve a job's TSDB on demand) into HTTP 503 with `Retry-After`: JSON
({"error"}) for the timeline's panel requests, the message alone for htmx (swapped in place: base.html's
htmx-config swaps 503), else a page with the app's layout.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from investigations.services import SourceBusy

#: Seconds a client is told to wait before it asks again.
RETRY_AFTER_S = 5


class SourceBusyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, SourceBusy):
            return None
        message = str(exception)
        if "application/json" in request.headers.get("Accept", ""):
            response: HttpResponse = JsonResponse({"error": message, "busy": True}, status=503)
        else:
            fragment = bool(request.headers.get("HX-Request"))
            template = "_busy.html" if fragment else "503.html"
            response = render(request, template, {"message": message, "retry_s": RETRY_AFTER_S}, status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
