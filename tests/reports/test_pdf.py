"""The PDF export is built by the worker's task, never in the request: the request queues it after commit,
the page shows "building…" and polls, then offers the download (real kaleido + WeasyPrint: text and the
pinned chart as an image); an unchanged report is not built twice; a failed build says why; a build whose
worker stopped is failed, never left building. (The task runs in a real worker in test_pdf_worker.py.)"""

from __future__ import annotations

import datetime as dt
import io

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone
from pypdf import PdfReader

from investigations.models import PinnedChart
from reports.models import Membership, PdfExport, Restriction, Team
from reports.services import exports, pdf, sections
from reports.tasks import report_pdf_task

from .conftest import HTMX
from .test_exports import FIGURE, url

pytestmark = pytest.mark.django_db


def _ask(client, case, django_capture_on_commit_callbacks) -> tuple[str, list]:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = client.post(url("pdf_build", case), **HTMX).content.decode()
    return body, callbacks


def _built(case) -> PdfExport:
    export = PdfExport.objects.get(report__investigation=case, status=PdfExport.Status.QUEUED)
    report_pdf_task(export.pk)  # what the worker runs (a real worker: test_pdf_worker.py)
    export.refresh_from_db()
    return export


def test_the_request_queues_the_build_and_the_page_offers_the_pdf_once_built(
    case, alice_client, alice, django_capture_on_commit_callbacks
) -> None:
    PinnedChart.objects.create(investigation=case, title="GPU temperature, tx-hpc-0003", figure=FIGURE)
    body, callbacks = _ask(alice_client, case, django_capture_on_commit_callbacks)
    assert len(callbacks) == 1  # the task is sent once the export row is committed
    export = PdfExport.objects.get(report__investigation=case)
    assert export.status == PdfExport.Status.QUEUED and export.pdf is None  # nothing built in the request
    assert 'data-testid="pdf-building"' in body and 'hx-trigger="every 1s"' in body
    assert alice_client.get(url("export", case, "pdf"))["Location"].endswith("#pdf-export")

    export = _built(case)
    assert export.status == PdfExport.Status.DONE and export.size > 1000
    region = alice_client.get(url("pdf_status", case, export.pk), **HTMX).content.decode()
    assert 'data-testid="pdf-download"' in region and "hx-trigger" not in region  # polling stops
    response = alice_client.get(url("pdf_download", case, export.pk))
    assert response["Content-Type"] == "application/pdf"
    document = PdfReader(io.BytesIO(response.content))
    text = "".join(page.extract_text() for page in document.pages)
    assert case.title in text and "Recommended next steps" in text and "thermal-straggler" in text
    assert "GPU temperature, tx-hpc-0003" in text
    # The chart is an image in the PDF, drawn by kaleido: a real PNG of the figure's size, not a blank.
    images = {image.name: image for page in document.pages for image in page.images}
    assert len(images) == 1
    picture = next(iter(images.values())).image
    assert picture.size == (1800, 640) and len(set(picture.convert("L").getdata())) > 10
    assert alice_client.get(url("export", case, "pdf")).content == response.content  # export.pdf serves it
    assert 'data-testid="pdf-download"' in alice_client.get(url("page", case)).content.decode()


def test_a_second_download_of_the_same_revision_builds_nothing_and_an_edit_builds_again(
    case, alice_client, alice, django_capture_on_commit_callbacks
) -> None:
    _ask(alice_client, case, django_capture_on_commit_callbacks)
    first = _built(case)
    body, callbacks = _ask(alice_client, case, django_capture_on_commit_callbacks)
    assert callbacks == [] and 'data-testid="pdf-download"' in body  # the same revision: no build
    assert PdfExport.objects.filter(report__investigation=case).count() == 1

    summary = sections.report_for(case).sections.get(key="summary")
    sections.section_save(summary.pk, base_version=summary.version, text="Our own words.", user=alice)
    body, callbacks = _ask(alice_client, case, django_capture_on_commit_callbacks)
    assert len(callbacks) == 1 and 'data-testid="pdf-building"' in body
    second = _built(case)
    assert second.revision != first.revision
    assert "Our own words." in "".join(p.extract_text() for p in PdfReader(io.BytesIO(second.pdf)).pages)
    assert not PdfExport.objects.filter(pk=first.pk).exists()  # only the newest revision's PDF is kept


def test_a_failed_build_shows_the_reason_and_can_be_built_again(
    case, alice_client, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    def broken(*_args, **_kwargs):  # a fault the real layout engine does not give on demand
        raise OSError("No space left on device")

    _ask(alice_client, case, django_capture_on_commit_callbacks)
    monkeypatch.setattr(exports, "report_pdf", broken)
    with pytest.raises(OSError):
        _built(case)
    export = PdfExport.objects.get(report__investigation=case)
    assert export.status == PdfExport.Status.FAILED
    region = alice_client.get(url("pdf_status", case, export.pk), **HTMX).content.decode()
    assert "No space left on device" in region and 'data-testid="pdf-error"' in region
    assert "Build the PDF again" in region and "hx-trigger" not in region
    monkeypatch.undo()
    _, callbacks = _ask(alice_client, case, django_capture_on_commit_callbacks)
    assert len(callbacks) == 1 and _built(case).status == PdfExport.Status.DONE


def test_a_build_past_its_soft_time_limit_is_failed_with_the_limit(
    case, alice_client, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    def slow(*_args, **_kwargs):  # Celery raises this in the task when the soft limit passes
        raise SoftTimeLimitExceeded()

    _ask(alice_client, case, django_capture_on_commit_callbacks)
    monkeypatch.setattr(exports, "report_pdf", slow)
    export = _built(case)
    assert export.status == PdfExport.Status.FAILED
    assert export.error == f"Building the PDF took longer than its time limit of {pdf.time_limit()} s."


def test_a_build_whose_worker_stopped_is_failed_not_left_building(
    case, alice_client, settings, django_capture_on_commit_callbacks
) -> None:
    settings.STEPWISE_REPORT_PDF_TIME_LIMIT = 20
    _ask(alice_client, case, django_capture_on_commit_callbacks)
    export = PdfExport.objects.get(report__investigation=case)
    assert pdf.pdf_claim(export.pk)  # a worker took it, then died: nothing ever finishes it
    region = alice_client.get(url("pdf_status", case, export.pk), **HTMX).content.decode()
    assert 'data-testid="pdf-building"' in region  # within its time limit it is building
    started = timezone.now() - dt.timedelta(seconds=20 + pdf.GRACE_SECONDS + 1)
    PdfExport.objects.filter(pk=export.pk).update(started=started)  # as if that much time had passed
    region = alice_client.get(url("pdf_status", case, export.pk), **HTMX).content.decode()
    assert "The worker stopped building this PDF" in region and "time limit of 20 s" in region
    assert PdfExport.objects.get(pk=export.pk).status == PdfExport.Status.FAILED
    report_pdf_task(export.pk)  # the task delivered again (acks_late) does not resurrect it
    assert PdfExport.objects.get(pk=export.pk).status == PdfExport.Status.FAILED


def test_a_queued_build_no_worker_takes_is_failed_with_the_reason(
    case, alice_client, settings, django_capture_on_commit_callbacks
) -> None:
    _ask(alice_client, case, django_capture_on_commit_callbacks)
    export = PdfExport.objects.get(report__investigation=case)
    wait = settings.STEPWISE_REPORT_PDF_TIME_LIMIT + settings.CELERY_TASK_TIME_LIMIT
    PdfExport.objects.filter(pk=export.pk).update(created=timezone.now() - dt.timedelta(seconds=wait + 1))
    region = alice_client.get(url("pdf_status", case, export.pk), **HTMX).content.decode()
    assert "No worker took this PDF" in region


def test_a_viewer_builds_the_pdf_and_another_teams_user_gets_404(
    case, alice_client, bob_client, alice, django_capture_on_commit_callbacks
) -> None:
    team = Team.objects.create(name="red")
    Membership.objects.create(team=team, user=alice, role="viewer")
    case.team = "red"
    case.save()
    Restriction.objects.create(investigation=case)
    assert bob_client.post(url("pdf_build", case), **HTMX).status_code == 404
    assert not PdfExport.objects.exists()
    _ask(alice_client, case, django_capture_on_commit_callbacks)  # reading is enough to export
    export = _built(case)
    for name in ("pdf_status", "pdf_download"):
        assert alice_client.get(url(name, case, export.pk), **HTMX).status_code == 200
        assert bob_client.get(url(name, case, export.pk), **HTMX).status_code == 404
