"""Writes to ``users``: the profile, the notice and rate throttles, verification state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce

from bots.models import BotUser, Topic, TopicStatus, UserStatus

NOTICE_INTERVAL = timedelta(seconds=60)
RATE_WINDOW = timedelta(seconds=60)
RISK_REMINDER_INTERVAL = timedelta(hours=24)

# The pending challenge (spec §5.3): clearing all six columns voids any outstanding challenge.
PENDING_CHALLENGE_CLEARED = {
    "verify_answer": None,
    "verify_msg_id": None,
    "verify_request_hash": None,
    "verify_request_expires_at": None,
    "verify_request_generation": None,
    "verify_submit_not_before": None,
}


@dataclass(frozen=True)
class EnsuredUser:
    user: BotUser
    is_new: bool  # the row was created by this call
    display_changed: bool  # first/last/username differed from the stored ones and were updated


_INSERT_SQL = """
insert into users (bot_id, user_id, first_name, last_name, username, first_seen_at, last_seen_at)
values (%s, %s, %s, %s, %s, %s, %s)
on conflict (bot_id, user_id) do nothing
returning user_id
"""


def user_ensure(
    *, bot_id: int, user_id: int, first_name: str, last_name: str, username: str, now: datetime
) -> EnsuredUser:
    """Create the user on first contact, else refresh ``last_seen_at`` and changed names.

    Governance columns (ban, risk, verification) are never touched here. Two first messages
    racing: ``ON CONFLICT DO NOTHING`` lets exactly one of them be ``is_new``.
    """
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_SQL, [bot_id, user_id, first_name, last_name, username, now, now])
        is_new = cursor.fetchone() is not None
    display_changed = False
    if not is_new:
        mine = BotUser.objects.filter(bot_id=bot_id, user_id=user_id)
        names_differ = ~Q(first_name=first_name) | ~Q(last_name=last_name) | ~Q(username=username)
        display_changed = (
            mine.filter(names_differ).update(
                first_name=first_name, last_name=last_name, username=username, last_seen_at=now
            )
            == 1
        )
        if not display_changed:
            mine.update(last_seen_at=now)
    user = BotUser.objects.get(bot_id=bot_id, user_id=user_id)
    return EnsuredUser(user=user, is_new=is_new, display_changed=display_changed)


def user_claim_notice_slot(*, bot_id: int, user_id: int, now: datetime) -> bool:
    """Claim the user's shared notice slot (welcome/ban/challenge/overflow: 1 per 60 s).

    True when this call won: ``last_notice_at`` was NULL or at least 60 s old and is now ``now``.
    """
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id)
        .filter(Q(last_notice_at__isnull=True) | Q(last_notice_at__lte=now - NOTICE_INTERVAL))
        .update(last_notice_at=now)
        == 1
    )


def user_count_message(*, bot_id: int, user_id: int, now: datetime, limit: int) -> bool:
    """Count one message in the user's 60 s fixed window; False when the window is full.

    One conditional UPDATE: a window that is NULL or at least 60 s old restarts at ``now`` with
    count 1; otherwise the count grows only while it is below ``limit``. So ``limit`` messages
    pass and the next one in the same window is refused.
    """
    window_over = Q(rate_window_start__isnull=True) | Q(rate_window_start__lte=now - RATE_WINDOW)
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id)
        .filter(window_over | Q(rate_count__lt=limit))
        .update(
            rate_window_start=Case(
                When(window_over, then=Value(now)), default=F("rate_window_start")
            ),
            rate_count=Case(When(window_over, then=Value(1)), default=F("rate_count") + 1),
        )
        == 1
    )


def user_clear_verification(*, bot_id: int, user_id: int) -> bool:
    """Unverify the user and void any pending challenge (TTL expiry, rate-limit overflow)."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id).update(
            is_verified=False, verified_at=None, **PENDING_CHALLENGE_CLEARED
        )
        == 1
    )


def user_mark_active(*, bot_id: int, user_id: int) -> bool:
    """Set ``status='active'`` (the user's conversation resumes); False if it already was."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id)
        .exclude(status=UserStatus.ACTIVE)
        .update(status=UserStatus.ACTIVE)
        == 1
    )


def user_claim_risk_reminder(*, bot_id: int, user_id: int, now: datetime) -> bool:
    """Claim the 24 h high-risk reminder slot of a user marked ``is_risk``; True when won."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id, is_risk=True)
        .filter(
            Q(risk_notice_at__isnull=True) | Q(risk_notice_at__lte=now - RISK_REMINDER_INTERVAL)
        )
        .update(risk_notice_at=now)
        == 1
    )


# ------------------------------------------------------------------ admin governance (spec §4)


def user_ban(*, bot_id: int, user_id: int) -> bool:
    """/ban: mute the user and, in the same statement, void any pending challenge (an old
    challenge must never complete after an unban). False: no such user."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id).update(
            is_banned=True, **PENDING_CHALLENGE_CLEARED
        )
        == 1
    )


def user_unban(*, bot_id: int, user_id: int) -> bool:
    """/unban: lift the mute only (nothing is restored; the user meets the gates again)."""
    return BotUser.objects.filter(bot_id=bot_id, user_id=user_id).update(is_banned=False) == 1


def user_set_risk(*, bot_id: int, user_id: int, is_risk: bool) -> bool:
    """/risk, /unrisk: set the flag and reset the 24 h reminder window in one statement, so a
    user marked again is reminded about on the next message."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id).update(
            is_risk=is_risk, risk_notice_at=None
        )
        == 1
    )


@transaction.atomic
def user_archive(*, bot_id: int, user_id: int, thread_id: int, now: datetime) -> bool:
    """/archive after the topic was closed in Telegram (spec §4.7 step 3), in one transaction.

    The user: verification cleared (pending challenge included), ``status='deleted'`` (the soft
    archive; back to active when the user's next conversation resumes). The binding: closed,
    ``closed_at`` kept when it was already closed (a repeated or redelivered /archive converges
    on the same row, as a repeated native close does). The users row, the binding, its note and
    the ledger are all kept. False: the user has no row (the binding is closed all the same).
    """
    archived = (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id).update(
            is_verified=False,
            verified_at=None,
            status=UserStatus.DELETED,
            **PENDING_CHALLENGE_CLEARED,
        )
        == 1
    )
    Topic.objects.filter(bot_id=bot_id, user_id=user_id, thread_id=thread_id).update(
        status=TopicStatus.CLOSED, closed_at=Coalesce("closed_at", Value(now))
    )
    return archived
