"""Building blocks of the bot's admin screens: scoping to the bot, read-only screens, the
Telegram context of an action, small formatting helpers."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from bots.admin.people import console_name
from bots.conf import load_config
from bots.models import AuditAction, AuditOutcome, AuditSurface
from bots.pipeline.context import BotContext
from bots.selectors import bot_current_id
from bots.services.audit import AuditActor, audit_record

# Telegram ids are bigint: longer digit strings cannot be an id (and would overflow the query).
LONGEST_ID = 18
NOT_CONFIGURED = "the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)"


def telegram_context(bot_id: int) -> BotContext | None:
    """What the Telegram steps of an action need, or None when the bot is not configured."""
    config = load_config()
    if not config.bot_token or config.support_chat_id is None:
        return None
    return BotContext(
        bot_id=bot_id,
        config=config,
        client=config.telegram_client(budget_seconds=config.send_budget_seconds),
        now=timezone.now(),
    )


def console_actor(request: HttpRequest) -> AuditActor:
    """The operator, for an outcome recorded by a job (a purge continued in Celery) or with a
    status change (a broadcast stopped while sending)."""
    return AuditActor(surface=AuditSurface.CONSOLE, actor_name=console_name(request))


def audit_from_console(
    request: HttpRequest,
    *,
    bot_id: int,
    action: AuditAction,
    outcome: AuditOutcome,
    user_id: int | None = None,
    detail: str = "",
) -> None:
    """Record an operator's action in the audit trail (the console user as the actor)."""
    audit_record(
        bot_id=bot_id,
        surface=AuditSurface.CONSOLE,
        action=action,
        outcome=outcome,
        now=timezone.now(),
        actor_name=console_name(request),
        target_user_id=user_id,
        detail=detail,
    )


def is_id(term: str) -> bool:
    return term.isascii() and term.isdigit() and len(term) <= LONGEST_ID


def id_list(rows: list[int]) -> str:
    return ", ".join(str(row) for row in rows)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Listed and inspected, never added, changed or deleted here. (The bot may not import
    telemetry's twin of this class: the apps stay independent, see ARCHITECTURE.md.)"""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class CurrentBotAdmin(admin.ModelAdmin):
    """Only the rows of this deployment's bot (none before setwebhook recorded it)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        bot_id = bot_current_id()
        return queryset.none() if bot_id is None else queryset.filter(bot_id=bot_id)


def relayed_messages_link(label: str, *, field: str, value: int) -> str:
    """A link to the relayed messages filtered by ``field`` (user_id or thread_id) = ``value``."""
    url = reverse("admin:bots_relayedmessage_changelist")
    return format_html('<a href="{}?{}={}">{}</a>', url, field, value, label)
