"""``Issued``: one admin command as issued (where, by which update, with which arguments), as
the command handlers of ``commands``, ``deluser`` and ``wipe`` receive it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bots.models import AuditAction, AuditOutcome
from bots.pipeline.audit import audit_from_telegram, telegram_audit_actor
from bots.pipeline.classify import GENERAL_THREAD_ID
from bots.pipeline.context import UpdateContext
from bots.pipeline.replies import reply_in_thread
from bots.services.audit import AuditActor


@dataclass(frozen=True)
class Issued:
    """One command as issued: where, by which update, with which arguments."""

    ctx: UpdateContext
    thread_id: int
    arguments: str
    admin: Mapping[str, Any]  # the admin's Telegram ``User``

    def audit(
        self,
        action: AuditAction,
        outcome: AuditOutcome,
        *,
        user_id: int | None = None,
        detail: str = "",
    ) -> None:
        """Record the command in the audit trail (once per update, redeliveries included)."""
        audit_from_telegram(
            self.ctx,
            admin=self.admin,
            action=action,
            outcome=outcome,
            target_user_id=user_id,
            detail=detail,
        )

    def actor(self) -> AuditActor:
        """The issuing admin, for an outcome recorded later by a job."""
        return telegram_audit_actor(self.admin)

    def reply(self, text: str) -> None:
        reply_in_thread(self.ctx, thread_id=self.thread_id, text=text)

    def report_in_general(self, text: str) -> None:
        reply_in_thread(self.ctx, thread_id=GENERAL_THREAD_ID, text=text)
