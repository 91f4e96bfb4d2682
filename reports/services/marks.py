"""What changed in a report, read in a few small queries: the live poll's region tokens and the PDF's
revision are both made from these marks (one read a page instead of a query per mark and per use)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, Max, OuterRef, QuerySet, Subquery

from reports.models import ActionItem, Comment, HumanFinding, Report, Section, Verdict


def _one(rows: QuerySet, value: Any) -> Subquery:
    """An aggregate of `rows` (filtered on the report) as a column of the report's row."""
    return Subquery(
        rows.filter(report_id=OuterRef("pk")).order_by().values("report_id").annotate(v=value).values("v")
    )


@dataclass(frozen=True)
class Marks:
    """The report's marks: each changes when what it stands for changes.

    Attributes:
        row: the report's status, version, export zone and machine fingerprint, the investigation's
            title, status, severity, team, owner and last change.
        sections, humans, actions: the newest history record of the sections, people's findings, actions.
        verdicts: the newest verdict change and how many verdicts there are.
        comments: the newest comment and how many there are.
        human_states: (pk, kind, evidence state) of each person's finding (a query still running).
        tickets, charts: the ticket links' and pinned charts' ids.
    """

    row: dict[str, Any]
    sections: Any
    humans: Any
    actions: Any
    verdicts: tuple[Any, int]
    comments: tuple[Any, int]
    human_states: list[tuple[Any, ...]]
    tickets: list[int]
    charts: list[int]

    @property
    def running(self) -> int:
        """People's PromQL findings whose query the worker has not answered yet."""
        return sum(1 for _, kind, state in self.human_states if kind == "query" and state == "running")


def _ids(rows: Any) -> list[int]:
    return list(rows.order_by("pk").values_list("pk", flat=True))


def report_marks(
    report: Report,
    *,
    tickets: list[int] | None = None,
    charts: list[int] | None = None,
    humans: list[HumanFinding] | None = None,
) -> Marks:
    """Read the report's marks; `tickets`, `charts` (ids) and `humans` (people's findings) are given when
    the caller has just read them (the report page: not read again)."""
    row: dict[str, Any] = dict(
        Report.objects.filter(pk=report.pk)
        .annotate(
            title=F("investigation__title"),
            inv_status=F("investigation__status"),
            severity=F("investigation__severity"),
            team=F("investigation__team"),
            owner=F("investigation__owner_id"),
            inv_updated=F("investigation__updated"),
            sections_h=_one(Section.history.model._default_manager.all(), Max("history_id")),
            humans_h=_one(HumanFinding.history.model._default_manager.all(), Max("history_id")),
            actions_h=_one(ActionItem.history.model._default_manager.all(), Max("history_id")),
            verdicts_t=_one(Verdict.objects.all(), Max("updated")),
            verdicts_n=_one(Verdict.objects.all(), Count("pk")),
            comments_m=_one(Comment.objects.all(), Max("pk")),
            comments_n=_one(Comment.objects.all(), Count("pk")),
        )
        .values(
            "status",
            "version",
            "export_tz",
            "fingerprint",
            "title",
            "inv_status",
            "severity",
            "team",
            "owner",
            "inv_updated",
            "sections_h",
            "humans_h",
            "actions_h",
            "verdicts_t",
            "verdicts_n",
            "comments_m",
            "comments_n",
        )  # fmt: skip
        .first()
        or {}
    )
    investigation = report.investigation
    return Marks(
        row=row,
        sections=row.get("sections_h"),
        humans=row.get("humans_h"),
        actions=row.get("actions_h"),
        verdicts=(row.get("verdicts_t"), row.get("verdicts_n") or 0),
        comments=(row.get("comments_m"), row.get("comments_n") or 0),
        human_states=(
            sorted((h.pk, h.kind, (h.evidence or {}).get("state")) for h in humans)
            if humans is not None
            else list(report.human_findings.order_by("pk").values_list("pk", "kind", "evidence__state"))
        ),
        tickets=sorted(tickets) if tickets is not None else _ids(investigation.ticket_links),
        charts=sorted(charts) if charts is not None else _ids(investigation.pinned_charts),
    )
