"""The audit trail's Telegram side: an admin's command or button, recorded once per update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bots.models import AuditAction, AuditOutcome, AuditSurface
from bots.pipeline.context import UpdateContext
from bots.services.audit import AuditActor, audit_record


def telegram_actor(admin: Mapping[str, Any]) -> tuple[int | None, str]:
    """The admin's Telegram id and a readable name (``@username``, else the first name)."""
    admin_id = admin.get("id")
    username = admin.get("username")
    name = f"@{username}" if isinstance(username, str) and username else admin.get("first_name")
    return (
        admin_id if isinstance(admin_id, int) and not isinstance(admin_id, bool) else None,
        name if isinstance(name, str) else "",
    )


def telegram_audit_actor(admin: Mapping[str, Any]) -> AuditActor:
    """The admin, for an outcome recorded later by a job or with a status change."""
    actor_id, actor_name = telegram_actor(admin)
    return AuditActor(surface=AuditSurface.TELEGRAM, actor_id=actor_id, actor_name=actor_name)


def audit_from_telegram(
    ctx: UpdateContext,
    *,
    admin: Mapping[str, Any],
    action: AuditAction,
    outcome: AuditOutcome,
    target_user_id: int | None = None,
    detail: str = "",
) -> None:
    """Record ``admin``'s action of this update (a redelivery records nothing more)."""
    actor_id, actor_name = telegram_actor(admin)
    audit_record(
        bot_id=ctx.bot_id,
        surface=AuditSurface.TELEGRAM,
        action=action,
        outcome=outcome,
        now=ctx.now,
        actor_id=actor_id,
        actor_name=actor_name,
        target_user_id=target_user_id,
        detail=detail,
        source_update_id=ctx.update_id,
    )
