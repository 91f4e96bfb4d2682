from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from .security import csp_report


@login_not_required
def favicon(request):
    """Browsers ask every site for /favicon.ico; answer with the app's icon instead of a 404."""
    return RedirectView.as_view(url=static("favicon.svg"), permanent=True)(request)


urlpatterns = [
    # LoginView is @login_not_required; every other view needs a session (LoginRequiredMiddleware).
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="registration/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", favicon, name="favicon"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(template_name="registration/password_change.html"),
        name="password_change",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(template_name="registration/password_change_done.html"),
        name="password_change_done",
    ),
    path("admin/", admin.site.urls),
    # Where browsers report what the Content-Security-Policy blocked (no session needed).
    path("csp-report/", csp_report, name="csp_report"),
    path("", include("reports.urls")),
    path("", include("investigations.urls")),
]
