"""The user actions of the users and topics screens: the admin commands' code, run on rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from bots.admin.common import NOT_CONFIGURED, audit_from_console, id_list, telegram_context
from bots.clients.telegram import TelegramError
from bots.models import AuditAction, AuditOutcome
from bots.pipeline.moderation import archive_conversation, set_risk
from bots.selectors import topic_get_for_user
from bots.services.users import user_ban, user_set_risk, user_unban

if TYPE_CHECKING:
    # A mixin of ModelAdmins: checked as one (at run time a plain class).
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class UserActions(_ModelAdminMixin):
    """Ban, unban, mark or clear high-risk, archive: for the users of the selected rows (users
    or topics — both carry ``(bot_id, user_id)``)."""

    actions = ["ban_users", "unban_users", "mark_risk", "clear_risk", "archive_conversations"]

    def _each_user(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        run: Callable[[int, int], bool],
        action: AuditAction,
    ) -> tuple[list[int], list[int]]:
        """Run ``run(bot_id, user_id)`` per selected row, each recorded in the audit trail;
        the user ids it changed and missed."""
        changed: list[int] = []
        missed: list[int] = []
        for bot_id, user_id in queryset.values_list("bot_id", "user_id"):
            done = run(bot_id, user_id)
            (changed if done else missed).append(user_id)
            audit_from_console(
                request,
                bot_id=bot_id,
                action=action,
                outcome=AuditOutcome.DONE if done else AuditOutcome.REFUSED,
                user_id=user_id,
                detail="" if done else "no user row",
            )
        return changed, missed

    def _report(
        self, request: HttpRequest, verb: str, changed: list[int], missed: list[int]
    ) -> None:
        if changed:
            self.message_user(request, f"{verb}: {id_list(changed)}.", messages.SUCCESS)
        if missed:
            self.message_user(request, f"No user row for: {id_list(missed)}.", messages.WARNING)

    @admin.action(description="Mute (ban) the selected users — as /ban")
    def ban_users(self, request: HttpRequest, queryset: QuerySet) -> None:
        changed, missed = self._each_user(
            request,
            queryset,
            lambda bot_id, user_id: user_ban(bot_id=bot_id, user_id=user_id),
            AuditAction.BAN,
        )
        self._report(request, "Muted", changed, missed)

    @admin.action(description="Unmute (unban) the selected users — as /unban")
    def unban_users(self, request: HttpRequest, queryset: QuerySet) -> None:
        changed, missed = self._each_user(
            request,
            queryset,
            lambda bot_id, user_id: user_unban(bot_id=bot_id, user_id=user_id),
            AuditAction.UNBAN,
        )
        self._report(request, "Unmuted", changed, missed)

    def _set_risk(self, request: HttpRequest, queryset: QuerySet, *, is_risk: bool) -> None:
        skipped_cards = []

        def run(bot_id: int, user_id: int) -> bool:
            ctx = telegram_context(bot_id)
            if ctx is not None:
                return set_risk(ctx, user_id=user_id, is_risk=is_risk)
            skipped_cards.append(user_id)
            return user_set_risk(bot_id=bot_id, user_id=user_id, is_risk=is_risk)

        action = AuditAction.RISK if is_risk else AuditAction.UNRISK
        changed, missed = self._each_user(request, queryset, run, action)
        verb = "Marked high-risk" if is_risk else "Cleared the high-risk mark of"
        self._report(request, verb, changed, missed)
        if skipped_cards:
            self.message_user(
                request,
                f"Cards not refreshed ({NOT_CONFIGURED}): {id_list(skipped_cards)}.",
                messages.WARNING,
            )

    @admin.action(description="Mark the selected users high-risk — as /risk")
    def mark_risk(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_risk(request, queryset, is_risk=True)

    @admin.action(description="Clear the high-risk mark — as /unrisk")
    def clear_risk(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_risk(request, queryset, is_risk=False)

    @admin.action(description="Archive the conversations (close the topics) — as /archive")
    def archive_conversations(self, request: HttpRequest, queryset: QuerySet) -> None:
        results: dict[str, list[int]] = {
            "archived": [],
            "gone": [],
            "not notified": [],
            "no binding": [],
            "not closed": [],
        }
        problems: list[str] = []
        for bot_id, user_id in queryset.values_list("bot_id", "user_id"):

            def audit(outcome: AuditOutcome, detail: str = "") -> None:
                audit_from_console(
                    request,
                    bot_id=bot_id,  # noqa: B023 - called inside this iteration only
                    action=AuditAction.ARCHIVE,
                    outcome=outcome,
                    user_id=user_id,  # noqa: B023
                    detail=detail,
                )

            ctx = telegram_context(bot_id)
            if ctx is None:
                problems.append(f"{user_id}: not archived, {NOT_CONFIGURED}")
                audit(AuditOutcome.REFUSED, NOT_CONFIGURED)
                continue
            topic = topic_get_for_user(bot_id=bot_id, user_id=user_id)
            if topic is None:
                results["no binding"].append(user_id)
                audit(AuditOutcome.REFUSED, "no topic")
                continue
            try:
                outcome = archive_conversation(ctx, topic=topic)
            except TelegramError as error:  # retryable: nothing or part done; repeating converges
                problems.append(f"{user_id}: Telegram did not answer ({error}); run it again")
                audit(AuditOutcome.FAILED, "Telegram did not answer")
                continue
            if not outcome.archived:
                results["not closed"].append(user_id)
                audit(AuditOutcome.FAILED, "Telegram refused to close the topic")
                continue
            audit(AuditOutcome.DONE)
            results["archived"].append(user_id)
            if outcome.topic_gone:
                results["gone"].append(user_id)
            if not outcome.user_notified:
                results["not notified"].append(user_id)
        self._report_archive(request, results, problems)

    def _report_archive(
        self, request: HttpRequest, results: dict[str, list[int]], problems: list[str]
    ) -> None:
        texts = {
            "archived": ("Archived (topic closed, verification cleared)", messages.SUCCESS),
            "gone": ("Their topic no longer existed (a new one comes on return)", messages.INFO),
            "not notified": ("The user could not be told (DM not delivered)", messages.WARNING),
            "no binding": ("No topic to archive", messages.WARNING),
            "not closed": ("Not archived: Telegram refused to close the topic", messages.ERROR),
        }
        for key, users in results.items():
            if users:
                text, level = texts[key]
                self.message_user(request, f"{text}: {id_list(users)}.", level)
        for problem in problems:
            self.message_user(request, problem, messages.ERROR)
