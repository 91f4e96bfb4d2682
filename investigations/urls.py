from __future__ import annotations

from django.urls import path

from . import views

app_name = "investigations"

urlpatterns = [
    path("", views.home, name="home"),
    path("sources/add/", views.source_add, name="source_add"),
    path("sources/<int:source_id>/sample-run/", views.run_start, name="run_start"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
]
