"""Read-only screens: the message ledger, processed updates, the bots row."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from bots.admin.common import CurrentBotAdmin, ReadOnlyAdmin, is_id
from bots.models import Bot, ProcessedUpdateListing, RelayedMessage


@admin.register(RelayedMessage)
class RelayedMessageAdmin(ReadOnlyAdmin, CurrentBotAdmin):
    list_display = (
        "id",
        "created_at",
        "direction",
        "content_type",
        "user_id",
        "thread_id",
        "group_msg_id",
        "private_msg_id",
    )
    list_filter = ("direction", "content_type")
    search_fields = ("user_id", "thread_id")
    search_help_text = "A user id or a thread id (exact)."
    ordering = ("-created_at", "-id")

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # The users' and topics' "messages" links filter the ledger by user or thread.
        return lookup in ("user_id", "thread_id") or super().lookup_allowed(lookup, value, request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if not is_id(term):
            return queryset.none(), False
        return queryset.filter(Q(user_id=int(term)) | Q(thread_id=int(term))), False


@admin.register(ProcessedUpdateListing)
class ProcessedUpdateAdmin(ReadOnlyAdmin, CurrentBotAdmin):
    list_display = ("update_id", "status", "attempts", "created_at")
    list_filter = ("status",)
    search_fields = ("update_id",)
    search_help_text = "An update id (exact)."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if not is_id(term):
            return queryset.none(), False
        return queryset.filter(update_id=int(term)), False


@admin.register(Bot)
class BotAdmin(ReadOnlyAdmin):
    list_display = ("bot_id", "username", "display_name", "created_at")
