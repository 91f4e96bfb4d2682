"""Set-up for the report's browser tests: a real diagnosis stored in the app under test, users, sign-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job

PASSWORD = "report-correct-horse-42"


@pytest.fixture(scope="session")
def thermal_result(served_job, tmp_path_factory) -> Path:
    """The thermal-straggler job diagnosed by the real engine, written as JSON for the app's shell."""
    client, _truth, job_dir = served_job("thermal-straggler")
    triage = triage_job(job_dir).to_dict()
    path = tmp_path_factory.mktemp("report-case") / "case.json"
    path.write_text(
        json.dumps(
            {"result": run_diagnosis(client, triage=triage), "triage": triage, "job_dir": str(job_dir)}
        )
    )
    return path


def make_case(
    app: Any,
    case_json: Path,
    *,
    tag: str,
    users: dict[str, str] | None = None,
    team: str = "",
    restricted: bool = False,
    memberships: dict[str, str] | None = None,
) -> int:
    """Create users (name -> "" or email), a team with memberships (name -> role), and an investigation of the
    diagnosed thermal job (under cluster `tag`, so tests do not share rows); return the investigation id."""
    code = f"""
import json
from django.contrib.auth import get_user_model
from django.utils import timezone
from investigations.models import DataSource, DiagnosisRun, Investigation, InvestigationJob, Job, TaskStatus
from investigations.services.decision import findings_record
from reports.models import Membership, Restriction, Team
case = json.load(open({str(case_json)!r}))
User = get_user_model()
for name, email in {users or {}!r}.items():
    if not User.objects.filter(username=name).exists():
        User.objects.create_user(name, email=email, password={PASSWORD!r})
if {team!r}:
    team, _ = Team.objects.get_or_create(name={team!r})
    for name, role in {memberships or {}!r}.items():
        Membership.objects.update_or_create(team=team, user=User.objects.get(username=name), defaults={{"role": role}})
inv = Investigation.objects.create(title="Thermal straggler {tag}", team={team!r})
if {restricted!r}:
    Restriction.objects.create(investigation=inv)
triage = case["triage"] | {{"state": "done", "finished": timezone.now().isoformat()}}
job = Job.objects.create(cluster={tag!r}, job_id=str(case["triage"]["job"]["id"]), job_dir=case["job_dir"], triage=triage)
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
DataSource.objects.create(job=job, kind="job_tsdb", address=case["job_dir"])
run = DiagnosisRun.objects.create(investigation=inv, job=job, status=TaskStatus.DONE, result=case["result"],
                                  finished=timezone.now(), playbooks=["thermal"])
findings_record(run, case["result"]["findings"])
Investigation.objects.filter(pk=inv.pk).update(incident_class=case["result"]["diagnosis"]["class"])
print(inv.pk)
"""
    return int(app.shell(code).strip().splitlines()[-1])


def sign_in(browser: Any, app: Any, username: str, password: str = PASSWORD) -> Any:
    """Return a page of a fresh browser context signed in as `username`."""
    from playwright.sync_api import expect

    from .conftest import EXPECT_TIMEOUT_MS

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    context = browser.new_context(base_url=app.base_url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
    return page
