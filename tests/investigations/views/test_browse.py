"""The htmx directory browser lists only folders inside the job roots and marks job directories."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .investigation_helpers import (
    HTMX,
    assert_login_required,
    roots,  # noqa: F401 (a fixture, used through usefixtures)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("roots")]


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:browse"))


def test_it_lists_a_root_with_job_markers(alice_client, job_factory, synth_root) -> None:
    job_dir, _ = job_factory("healthy")
    body = alice_client.get(
        reverse("investigations:browse"), {"path": str(synth_root)}, **HTMX
    ).content.decode()
    assert body.lstrip().startswith('<div id="dir-browser"')
    assert job_dir.name in body and f'data-path="{job_dir.resolve()}"' in body
    assert 'title="has a prometheus/ folder"' in body and 'title="has a log"' in body


@pytest.mark.parametrize(
    "path, message", [("/etc", "outside the allowed job roots"), ("/x/../etc", "contains")]
)
def test_it_refuses_paths_outside_the_roots(alice_client, path, message) -> None:
    body = alice_client.get(reverse("investigations:browse"), {"path": path}, **HTMX).content.decode()
    assert message in body and 'role="alert"' in body
    assert "/etc/" not in body.replace(path, "")


def test_without_htmx_it_redirects_to_the_new_page(alice_client, synth_root) -> None:
    response = alice_client.get(reverse("investigations:browse"), {"path": str(synth_root)})
    assert response.status_code == 302 and response["Location"].startswith(reverse("investigations:new"))


def test_inside_a_job_directory_it_offers_that_folder(alice_client, job_factory) -> None:
    job_dir, _ = job_factory("healthy")
    body = alice_client.get(reverse("investigations:browse"), {"path": str(job_dir)}, **HTMX).content.decode()
    assert "Use this folder" in body and f'data-path="{job_dir.resolve()}"' in body
