"""The new-investigation page: the four sources and a directory browser that starts at the job roots."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .investigation_helpers import (
    assert_login_required,
    roots,  # noqa: F401 (a fixture, used through usefixtures)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("roots")]


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:new"))


def test_it_offers_the_four_sources_and_lists_the_roots(alice_client, synth_root) -> None:
    body = alice_client.get(reverse("investigations:new")).content.decode()
    for value in ("job_dir", "upload", "url", "tunnel"):
        assert f'id="src-{value}"' in body
    assert str(synth_root.resolve()) in body
    assert 'enctype="multipart/form-data"' in body


def test_it_prefills_a_picked_directory_and_browses_without_js(alice_client, job_factory, synth_root) -> None:
    job_dir, _ = job_factory("healthy")
    body = alice_client.get(
        reverse("investigations:new"),
        {"source": "job_dir", "job_dir": str(job_dir), "browse": str(synth_root)},
    ).content.decode()
    assert f'value="{job_dir}"' in body
    assert job_dir.name in body and "TSDB" in body


def test_a_refused_browse_path_shows_why(alice_client) -> None:
    body = alice_client.get(reverse("investigations:new"), {"browse": "/etc"}).content.decode()
    assert "outside the allowed job roots" in body
