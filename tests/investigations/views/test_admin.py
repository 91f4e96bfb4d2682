"""The admin lists and shows every model of the app, with stored JSON read-only."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from investigations.models import Job

from .investigation_helpers import make_investigation

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="root-correct-horse-42")
    client.force_login(user)
    return client


def test_every_model_of_the_app_is_registered() -> None:
    from django.apps import apps

    models = set(apps.get_app_config("investigations").get_models())
    assert models <= set(admin.site._registry)


def test_every_changelist_and_change_page_renders(admin_client_) -> None:
    make_investigation(triage={"state": "done", "job": {"status": "failed", "triage_class": "oom-host"}})
    from django.apps import apps

    for model in apps.get_app_config("investigations").get_models():
        meta = model._meta
        listing = admin_client_.get(
            reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"), {"q": "x"}
        )
        assert listing.status_code == 200, meta.model_name
        obj = model.objects.first()
        if obj is not None:
            page = admin_client_.get(
                reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
            )
            assert page.status_code == 200, meta.model_name


def test_the_triage_is_shown_read_only(admin_client_) -> None:
    make_investigation(triage={"state": "done", "job": {"status": "failed", "triage_class": "oom-host"}})
    job = Job.objects.get()
    body = admin_client_.get(reverse("admin:investigations_job_change", args=[job.pk])).content.decode()
    assert "&quot;triage_class&quot;: &quot;oom-host&quot;" in body
    assert 'name="triage"' not in body
