"""A user opens investigations in a real browser: each kind of source, triage and discovery appearing in place,
clear messages for bad input, and the list's filters and search."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from playbooks.synth import SCENARIOS
from tests.browser.page_helpers import unfold

DETAIL_URL = re.compile(r"/investigations/\d+/$")


def _start(page: Page, title: str, source_label: str, cluster: str = "") -> None:
    """Open the new-investigation page, name it and pick the source.

    Jobs are keyed by (cluster, JOB_ID), and one generated job is opened by several tests: a test that
    must not see another test's rows for the same job gives its own cluster.
    """
    page.goto("/investigations/new/")
    page.get_by_label("Title").fill(title)
    page.locator(".source-tab", has_text=source_label).click()
    if cluster:
        page.get_by_text("Job id and cluster").click()
        page.get_by_label("Cluster").fill(cluster)


def _submit(page: Page) -> None:
    """Submit the form and wait for the next page's load event (htmx binds its handlers by then)."""
    with page.expect_navigation():
        page.get_by_role("button", name="Open investigation").click()


def _expect_triage(page: Page, truth: dict) -> None:
    """The triage region fills in by itself (htmx polling) with the status and class of the job's truth."""
    expect(page.get_by_test_id("triage-status")).to_have_text(truth["status"])
    expect(page.get_by_test_id("triage-class")).to_have_text(truth["triage_class"] or "none matched")


def _expect_discovery(page: Page, truth: dict, identity: str | None = "identity-match") -> None:
    """The discovery region fills in by itself once the worker has asked the job's Prometheus."""
    expect(page.get_by_test_id("discovery-hosts")).to_contain_text(f"{len(truth['hosts'])} ×")
    expect(page.get_by_test_id("discovery-line")).to_contain_text(f"{len(truth['hosts'])} hosts")
    if identity:
        unfold(page, "#discovery-status")
        expect(page.get_by_test_id(identity)).to_be_visible()


def test_a_signed_out_visitor_is_sent_to_the_login_page(anon_page: Page) -> None:
    anon_page.goto("/")
    expect(anon_page).to_have_url(re.compile(r"/login/"))
    expect(anon_page.get_by_role("button", name="Sign in")).to_be_visible()


def test_a_job_directory_picked_by_browsing_opens_with_its_triage(
    page: Page, job_factory, stepwise_app
) -> None:
    job_dir, truth = job_factory("collective-hang")
    _start(page, "Hang on the llama run", "Job directory", cluster="browse")
    browser = page.locator("#dir-browser")
    browser.get_by_role("link", name=str(stepwise_app.job_root.resolve())).click()
    expect(page.get_by_test_id("dir-path")).to_have_text(str(stepwise_app.job_root.resolve()))
    row = browser.locator("li", has=page.get_by_role("link", name=job_dir.name, exact=True))
    expect(row.locator(".badge", has_text="TSDB")).to_be_visible()
    row.get_by_role("link", name="Use").click()
    expect(page.get_by_role("textbox", name="Job directory")).to_have_value(str(job_dir.resolve()))
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    expect(page.get_by_role("heading", name="Hang on the llama run")).to_be_visible()
    _expect_triage(page, truth)
    expect(page.locator("#triage")).to_contain_text("Last step")
    _expect_discovery(page, truth)
    expect(page.get_by_test_id("source-state")).to_have_text("Up")
    expect(page.locator("#jobs")).to_contain_text(truth["triage_class"])
    page.screenshot(path=str(stepwise_app.log_dir / "investigation-job-dir.png"), full_page=True)


def test_the_job_id_from_the_alert_is_enough(page: Page, job_factory) -> None:
    """Typed instead of a path, the job id opens the job's folder (found by its log header)."""
    # a seed no other test generates: the shared job folder holds this JOB_ID once (else: ambiguous)
    job_dir, truth = job_factory("rdma-degradation", 29)
    _start(page, "Paged for job id", "Job directory", cluster="by-id")
    page.get_by_role("textbox", name="Job directory").fill(truth["job_id"])
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    _expect_triage(page, truth)
    _expect_discovery(page, truth)
    expect(page.locator("#jobs")).to_contain_text(str(job_dir.resolve()))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_opens_with_its_triage_and_discovery(page: Page, job_factory, scenario: str) -> None:
    """The issue's bar: a correct triage and discovery for every scenario of the generator."""
    job_dir, truth = job_factory(scenario)
    _start(page, f"Scenario {scenario}", "Job directory", cluster=f"every-{scenario}")
    page.get_by_role("textbox", name="Job directory").fill(str(job_dir))
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    _expect_triage(page, truth)
    _expect_discovery(page, truth)


def test_an_uploaded_log_with_the_url_of_its_prometheus(page: Page, served_job) -> None:
    client, truth, job_dir = served_job("heartbeat-false-positive")
    _start(page, "Heartbeat timeout", "Upload a log", cluster="upload")
    page.get_by_label("Job log").set_input_files(str(job_dir / "log"))
    page.get_by_role("textbox", name="Prometheus URL").fill(client.base_url)
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    _expect_triage(page, truth)
    _expect_discovery(page, truth)
    expect(page.get_by_test_id("source-state")).to_have_text("Up")
    for host in truth["accused_hosts"]:
        expect(page.locator("#triage")).to_contain_text(host)


def test_a_prometheus_url_alone_opens_without_triage(page: Page, served_job) -> None:
    client, truth, job_dir = served_job("healthy")
    _start(page, "Live job via tunnel", "Prometheus URL", cluster="url")
    page.get_by_role("textbox", name="Prometheus URL").fill(client.base_url)
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    expect(page.get_by_test_id("source-state")).to_have_text("Up")
    expect(page.get_by_test_id("triage-none")).to_contain_text("no log")
    _expect_discovery(page, truth, identity="identity-unknown")
    # The log arrives later: upload it from the triage region, and the triage appears in place.
    page.locator("#triage").get_by_label("Job log").set_input_files(str(job_dir / "log"))
    page.get_by_role("button", name="Upload and triage").click()
    _expect_triage(page, truth)


def test_bad_paths_urls_and_a_down_prometheus_each_get_a_clear_message(page: Page, stepwise_app) -> None:
    _start(page, "Bad path", "Job directory")
    page.get_by_role("textbox", name="Job directory").fill("/etc")
    _submit(page)
    expect(page.get_by_role("alert").filter(has_text="outside the allowed job roots")).to_be_visible()

    _start(page, "Bad URL", "Prometheus URL")
    page.get_by_role("textbox", name="Prometheus URL").fill("http://10.1.2.3:9090")
    _submit(page)
    expect(page.get_by_role("alert").filter(has_text="is not allowed")).to_be_visible()

    closed = _closed_port_url()
    _start(page, "Down Prometheus", "Prometheus URL")
    page.get_by_role("textbox", name="Prometheus URL").fill(closed)
    _submit(page)
    expect(page.get_by_role("alert").filter(has_text=f"No Prometheus answers at {closed}")).to_be_visible()

    page.goto("/investigations/new/?source=job_dir&browse=/etc/../etc")
    expect(page.locator("#dir-browser").get_by_role("alert")).to_contain_text("..")
    titles = {row[0] for row in stepwise_app.rows("SELECT title FROM investigations_investigation")}
    assert not titles & {"Bad path", "Bad URL", "Down Prometheus"}


def test_a_garbage_log_is_triaged_with_what_could_not_be_read(page: Page, tmp_path: Path) -> None:
    garbage = tmp_path / "core.bin"
    garbage.write_bytes(bytes(range(256)) * 32 + b"\n" + os.urandom(4096))
    _start(page, "Garbage upload", "Upload a log", cluster="garbage")
    page.get_by_label("Job log").set_input_files(str(garbage))
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    expect(page.get_by_test_id("triage-unreadable")).to_contain_text("binary")


def test_status_severity_and_owner_change_in_place_and_a_baseline_joins(
    page: Page, job_factory, stepwise_app
) -> None:
    job_dir, _ = job_factory("restore-resource-leak")
    baseline = job_dir.with_name(job_dir.name + "-baseline")
    _start(page, "Leak after restore", "Job directory", cluster="restore")
    page.get_by_role("textbox", name="Job directory").fill(str(job_dir))
    _submit(page)
    expect(page).to_have_url(DETAIL_URL)
    pk = int(page.url.rstrip("/").rsplit("/", 1)[1])
    header = page.locator("#investigation-header")
    header.get_by_label("Status").select_option("monitoring")
    expect(page.locator("#investigation-header select.status-monitoring")).to_be_visible()  # swapped in
    # htmx binds the new header's handlers as it settles; a person is never faster than that, a test is.
    page.wait_for_function("() => !document.querySelector('#investigation-header.htmx-added')")
    header.get_by_label("Severity").select_option("sev1")
    expect(page.locator("#investigation-header select.sev-sev1")).to_be_visible()
    assert stepwise_app.rows(
        "SELECT status, severity FROM investigations_investigation WHERE id = ?", (pk,)
    ) == [("monitoring", "sev1")]
    page.get_by_text("Add a job to compare").click()
    page.locator("#jobs").get_by_role("textbox").fill(str(baseline))
    page.locator("#jobs").get_by_role("combobox").select_option("baseline")
    page.get_by_role("button", name="Add job").click()
    baseline_row = page.locator("#jobs tbody tr", has_text=baseline.name)
    expect(baseline_row).to_contain_text("Baseline")
    expect(baseline_row).to_contain_text("completed")  # its own triage ran and the region refreshed


def test_the_list_filters_and_searches_in_place(page: Page, stepwise_app) -> None:
    stepwise_app.shell(
        "from investigations.models import Investigation as I\n"
        "I.objects.create(title='Alpha straggler', status='monitoring', incident_class='tgs-degradation')\n"
        "I.objects.create(title='Beta hang', status='resolved', incident_class='hang')\n"
    )
    page.goto("/")
    table = page.locator("#investigation-table")
    expect(table).to_contain_text("Alpha straggler")
    page.get_by_label("Search").fill("beta")
    expect(table).to_contain_text("Beta hang")
    expect(table).not_to_contain_text("Alpha straggler")
    expect(page).to_have_url(re.compile(r"q=beta"))
    page.get_by_label("Search").fill("")
    page.get_by_label("Status").select_option("monitoring")
    expect(table).to_contain_text("Alpha straggler")
    expect(table).not_to_contain_text("Beta hang")
    page.get_by_label("Status").select_option("")
    page.get_by_label("Class").select_option("hang")
    expect(table).to_contain_text("Beta hang")
    expect(table).not_to_contain_text("Alpha straggler")
    # Without JavaScript the same filters are a plain GET.
    page.goto("/?class=tgs-degradation")
    expect(page.locator("#investigation-table")).to_contain_text("Alpha straggler")


def _closed_port_url() -> str:
    """Return a loopback URL where nothing listens, on a Prometheus port the default allow-list admits
    (9090-9199; outside the TSDB servers' range, where tests running alongside start Prometheus servers)."""
    for port in range(9199, 9089, -1):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return f"http://127.0.0.1:{port}"
    raise RuntimeError("every port of 9090-9199 is taken")
