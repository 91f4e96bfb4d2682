from __future__ import annotations

from django.contrib import admin
from simple_history.admin import SimpleHistoryAdmin

from .models import (
    ActionItem,
    Comment,
    HumanFinding,
    Membership,
    Report,
    Restriction,
    Section,
    Team,
    TicketLink,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams and their members' roles (owner, editor, viewer)."""

    inlines = [MembershipInline]
    search_fields = ["name"]


@admin.register(Restriction)
class RestrictionAdmin(admin.ModelAdmin):
    """Investigations visible to their team only."""

    list_display = ["investigation", "created"]
    autocomplete_fields = ["investigation"]


@admin.register(Report)
class ReportAdmin(SimpleHistoryAdmin):
    list_display = ["investigation", "status", "version", "updated"]
    readonly_fields = ["fingerprint", "share_token"]


@admin.register(Section)
class SectionAdmin(SimpleHistoryAdmin):
    list_display = ["report", "title", "version", "edited", "updated_by", "updated"]
    list_filter = ["key", "edited"]


admin.site.register(HumanFinding, SimpleHistoryAdmin)
admin.site.register(ActionItem, SimpleHistoryAdmin)
admin.site.register(Comment)
admin.site.register(TicketLink)
