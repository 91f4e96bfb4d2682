"""Team membership in the browser, with two people in two browser contexts: the team's owner adds the
second user as a viewer on the Team page; the viewer then sees the team's restricted investigation, but
cannot edit it (a field changed anyway says it was not saved), and the investigation's activity stream says
who added whom."""

from __future__ import annotations

from playwright.sync_api import expect

from .report_helpers import make_case, sign_in, thermal_result  # noqa: F401 (fixture)


def test_an_owner_adds_a_viewer_who_then_reads_but_cannot_edit(browser, stepwise_app, thermal_result) -> None:  # noqa: F811
    inv = make_case(
        stepwise_app,
        thermal_result,
        tag="teamflow",
        users={"olga": "", "vic": ""},
        team="olga-team",
        restricted=True,
        memberships={"olga": "owner"},
    )
    olga, vic = sign_in(browser, stepwise_app, "olga"), sign_in(browser, stepwise_app, "vic")
    try:
        hidden = vic.request.get(f"/investigations/{inv}/report/")  # not of the team yet
        assert hidden.status == 404
        # Worded as a missing one is: it does not tell that the investigation exists.
        assert f"No investigation #{inv} that you can see" in hidden.text()

        olga.goto("/teams/")
        olga.get_by_role("link", name="olga-team").click()
        expect(olga.get_by_test_id("team-role")).to_have_text("you: owner")
        olga.get_by_test_id("invite-username").fill("vic")
        olga.get_by_test_id("invite-role").select_option("viewer")
        olga.get_by_test_id("invite").click()
        row = olga.locator('[data-testid="member"][data-user="vic"]')
        expect(row.get_by_test_id("member-role")).to_have_value("viewer")

        vic.goto(f"/investigations/{inv}/report/")
        expect(vic.get_by_test_id("role")).to_have_text("viewer")
        expect(vic.locator("#section-summary").get_by_test_id("body")).to_contain_text("thermal-straggler")
        expect(vic.get_by_test_id("edit")).to_have_count(0)
        expect(vic.get_by_test_id("report-status")).to_be_disabled()
        vic.goto("/teams/")
        vic.get_by_role("link", name="olga-team").click()
        expect(vic.get_by_test_id("team-role")).to_have_text("you: viewer")
        expect(vic.get_by_test_id("invite")).to_have_count(0)  # a viewer does not manage the team

        # A viewer who changes a field that saves on change is told it was refused, and the field goes back.
        vic.goto(f"/investigations/{inv}/")
        severity = vic.locator(".inv-meta select[name=severity]")
        stored = severity.input_value()
        severity.select_option("sev1" if stored != "sev1" else "sev4")
        expect(vic.locator("#action-error")).to_have_text(
            "Not saved: Your role on this investigation does not allow changes."
        )
        expect(severity).to_have_value(stored)

        activity = vic.request.get(f"/investigations/{inv}/report/activity/").text()
        assert "added vic to team olga-team as viewer" in activity and "olga" in activity
    finally:
        olga.context.close()
        vic.context.close()
