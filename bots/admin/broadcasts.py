"""The broadcasts screen: what is in progress (state, counts, remaining, who started it), and
stopping one — a draft is cancelled, a running send stops before its next recipient — through
the state machine's own service (``bots.pipeline.broadcast.console``). Each stop is one row of
the audit trail: a running send's is written with its status change (cancelled, with the
counts: that broadcast's outcome), a draft's or a refused one's here."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from bots.admin.common import (
    NOT_CONFIGURED,
    CurrentBotAdmin,
    audit_from_console,
    console_actor,
    id_list,
    telegram_context,
)
from bots.models import AuditAction, AuditOutcome, Broadcast, BroadcastStatus
from bots.pipeline.broadcast.console import stop_broadcast
from bots.pipeline.broadcast.display import remaining
from bots.services.broadcast_audit import broadcast_detail
from bots.services.broadcast_progress import sends_in_flight


@admin.register(Broadcast)
class BroadcastAdmin(CurrentBotAdmin):
    list_display = (
        "id",
        "status",
        "started_by",
        "expected_count",
        "success_count",
        "failed",
        "in_flight",
        "remaining_recipients",
        "created_at",
        "confirmed_at",
        "updated_at",
    )
    list_filter = ("status",)
    ordering = ("-id",)
    fields = (
        "id",
        "status",
        "started_by",
        "expected_count",
        "success_count",
        "failed",
        "in_flight",
        "remaining_recipients",
        "message_html",
        "preview_msg_id",
        "control_msg_id",
        "created_at",
        "expires_at",
        "confirmed_at",
        "updated_at",
    )
    readonly_fields = fields
    actions = ["stop_broadcasts"]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # the state machine changes broadcasts; fields are never edited by hand

    @admin.display(description="started by (Telegram id)")
    def started_by(self, obj: Broadcast) -> int:
        return obj.initiator_user_id

    def _in_flight(self, obj: Broadcast) -> int:
        if obj.status != BroadcastStatus.SENDING:
            return 0
        return sends_in_flight(
            broadcast_id=obj.id,
            success_count=obj.success_count,
            failure_count=obj.failure_count,
        )

    @admin.display(description="failed")
    def failed(self, obj: Broadcast) -> int:
        # A send is claimed (counted as a failure) before it starts: the one in flight is
        # shown apart until its outcome is recorded.
        return obj.failure_count - self._in_flight(obj)

    @admin.display(description="in flight")
    def in_flight(self, obj: Broadcast) -> int | str:
        return self._in_flight(obj) if obj.status == BroadcastStatus.SENDING else "—"

    @admin.display(description="remaining")
    def remaining_recipients(self, obj: Broadcast) -> int | str:
        return remaining(obj) if obj.status == BroadcastStatus.SENDING else "—"

    @admin.action(description="Stop the selected broadcasts (a draft is cancelled)")
    def stop_broadcasts(self, request: HttpRequest, queryset: QuerySet) -> None:
        cancelled, stopping, untouched = [], [], []
        for bot_id, broadcast_id in queryset.values_list("bot_id", "id"):
            ctx = telegram_context(bot_id)
            stopped = stop_broadcast(
                ctx,
                bot_id=bot_id,
                broadcast_id=broadcast_id,
                now=timezone.now(),
                stopped_by=console_actor(request),
            )
            # A running send's stop is its outcome's row, written with the status change.
            if stopped.status != BroadcastStatus.FAILED:
                audit_from_console(
                    request,
                    bot_id=bot_id,
                    action=AuditAction.BROADCAST,
                    outcome=(
                        AuditOutcome.CANCELLED
                        if stopped.status == BroadcastStatus.CANCELLED
                        else AuditOutcome.REFUSED
                    ),
                    detail=broadcast_detail(
                        broadcast_id,
                        "stop"
                        if stopped.status == BroadcastStatus.CANCELLED
                        else "stop: not in progress any more",
                    ),
                )
            if stopped.status == BroadcastStatus.CANCELLED:
                cancelled.append(broadcast_id)
                if not stopped.shown:
                    problem = NOT_CONFIGURED if ctx is None else stopped.problem
                    self.message_user(
                        request,
                        f"Broadcast {broadcast_id}: its message in General is not updated "
                        f"({problem}).",
                        messages.WARNING,
                    )
            elif stopped.status == BroadcastStatus.FAILED:
                stopping.append(broadcast_id)
            else:
                untouched.append(broadcast_id)
        if cancelled:
            self.message_user(request, f"Cancelled: {id_list(cancelled)}.", messages.SUCCESS)
        if stopping:
            self.message_user(
                request,
                f"Stopping: {id_list(stopping)} — the send stops before its next recipient and "
                "its message in General shows what was sent.",
                messages.SUCCESS,
            )
        if untouched:
            self.message_user(
                request, f"Not in progress any more: {id_list(untouched)}.", messages.WARNING
            )
