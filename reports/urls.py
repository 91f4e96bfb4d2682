from __future__ import annotations

from django.urls import path

from .views import conversation, exports, findings, page, pdf, sections, teams

app_name = "reports"

_R = "investigations/<int:investigation_id>/report/"

urlpatterns = [
    path(_R, page.page, name="page"),
    path(_R + "live/", page.live, name="live"),
    path(_R + "status/", page.status, name="status"),
    path(_R + "activity/", page.activity_view, name="activity"),
    path(_R + "sections/<slug:key>/", sections.show, name="section"),
    path(_R + "sections/<slug:key>/save/", sections.save, name="section_save"),
    path(_R + "sections/<slug:key>/machine/", sections.machine, name="section_machine"),
    path(_R + "sections/<slug:key>/history/", sections.history, name="section_history"),
    path(
        _R + "sections/<slug:key>/history/<int:history_id>/restore/", sections.restore, name="section_restore"
    ),
    path(_R + "findings/add/", findings.add, name="finding_add"),
    path(_R + "findings/<int:finding_id>/verdict/", findings.verdict, name="verdict"),
    path(_R + "comments/", conversation.comment, name="comment"),
    path(_R + "actions/", conversation.action_add, name="action_add"),
    path(_R + "actions/<int:item_id>/done/", conversation.action_done, name="action_done"),
    path(_R + "export.<slug:fmt>", exports.export, name="export"),
    path(_R + "pdf/", pdf.build, name="pdf_build"),
    path(_R + "pdf/<int:export_id>/", pdf.status, name="pdf_status"),
    path(_R + "pdf/<int:export_id>/download/", pdf.download, name="pdf_download"),
    path(_R + "ticket.md", exports.ticket, name="ticket"),
    path(_R + "tickets/", exports.ticket_add, name="ticket_add"),
    path(_R + "tickets/<int:link_id>/remove/", exports.ticket_remove, name="ticket_remove"),
    path(_R + "share/", exports.share, name="share"),
    path(_R + "zone/", exports.export_zone, name="export_zone"),
    path(_R + "restrict/", exports.restrict, name="restrict"),
    path(_R + "delete/", exports.delete, name="delete"),
    path("share/<str:token>/", exports.shared, name="shared"),
    path("teams/", teams.team_list, name="teams"),
    path("teams/<int:team_id>/", teams.team, name="team"),
    path("teams/<int:team_id>/members/", teams.member_add, name="member_add"),
    path("teams/<int:team_id>/members/<int:membership_id>/role/", teams.member_role, name="member_role"),
    path(
        "teams/<int:team_id>/members/<int:membership_id>/remove/", teams.member_remove, name="member_remove"
    ),
    path("inbox/", conversation.inbox, name="inbox"),
    path("inbox/count/", conversation.inbox_count, name="inbox_count"),
]
