"""The audit trail screen: every admin action, from Telegram or the console, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from bots.admin.common import ReadOnlyAdmin, is_id
from bots.admin.people import PROFILE, operator_names, profile_user, user_link, with_user_profiles
from bots.models import AdminAuditEntry, AuditSurface
from bots.selectors import bot_current_id


class AuditChangeList(ChangeList):
    """Reads the names of the page's console operators once (rows written before the name was
    recorded carry the admin row's id)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        console = [row for row in self.result_list if row.surface == AuditSurface.CONSOLE]
        names = operator_names(row.actor_name for row in console)
        for row in console:
            row.actor_name = names.get(row.actor_name, row.actor_name)


@admin.register(AdminAuditEntry)
class AdminAuditEntryAdmin(ReadOnlyAdmin):
    """Who did what to which user, when, from where, and how it ended; filter by action,
    surface, outcome and day; search by the user's or the admin's id, or the admin's name."""

    list_display = (
        "created_at",
        "surface",
        "actor",
        "action",
        "user",
        "outcome",
        "detail",
    )
    list_filter = ("action", "surface", "outcome", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor_name",)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    show_full_result_count = False

    def get_changelist(self, request: HttpRequest, **kwargs):
        return AuditChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        bot_id = bot_current_id()
        queryset = super().get_queryset(request)
        if bot_id is None:
            return queryset.none()
        return with_user_profiles(queryset.filter(bot_id=bot_id), user_field="target_user_id")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if is_id(term):
            by_id = queryset.filter(target_user_id=int(term)) | queryset.filter(actor_id=int(term))
            return by_id, False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="who", ordering="actor_name")
    def actor(self, obj: AdminAuditEntry) -> str:
        if obj.actor_id is not None:
            return f"{obj.actor_name} ({obj.actor_id})" if obj.actor_name else str(obj.actor_id)
        return obj.actor_name

    @admin.display(description="user", ordering="target_user_id")
    def user(self, obj: AdminAuditEntry) -> SafeString:
        if obj.target_user_id is None:
            return user_link(None, None)
        profile = getattr(obj, PROFILE, None)
        return user_link(obj.target_user_id, profile_user(obj.target_user_id, profile))
