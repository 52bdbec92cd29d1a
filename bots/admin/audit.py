"""The audit trail screen: every admin action, from Telegram or the console, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from bots.admin.common import ReadOnlyAdmin, is_id
from bots.models import AdminAuditEntry
from bots.selectors import bot_current_id


@admin.register(AdminAuditEntry)
class AdminAuditEntryAdmin(ReadOnlyAdmin):
    """Who did what to which user, when, from where, and how it ended; filter by action,
    surface, outcome and day; search by the user's or the admin's id, or the admin's name."""

    list_display = (
        "created_at",
        "surface",
        "actor",
        "action",
        "target_user_id",
        "outcome",
        "detail",
    )
    list_filter = ("action", "surface", "outcome", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor_name",)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        bot_id = bot_current_id()
        queryset = super().get_queryset(request)
        return queryset.filter(bot_id=bot_id) if bot_id is not None else queryset.none()

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
