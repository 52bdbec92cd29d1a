"""Writes to ``users``: the profile, the notice and rate throttles, verification state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import Case, F, Q, Value, When

from bots.models import BotUser, UserStatus
from bots.services.topics import topic_mark_closed

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

# Unverified, and no challenge pending: a TTL expiry, a rate-limit overflow, /archive.
VERIFICATION_CLEARED = {"is_verified": False, "verified_at": None, **PENDING_CHALLENGE_CLEARED}


@dataclass(frozen=True)
class EnsuredUser:
    user: BotUser
    is_new: bool  # the row was created by this call
    display_changed: bool  # first/last/username differed from the stored ones and were updated


_FIELD_NAMES = [field.attname for field in BotUser._meta.concrete_fields]

# The names as they were before this statement come from the same row, locked, so that the
# comparison is against the latest committed names even when two messages of the user overlap.
_REFRESH_SQL = """
update users as stored
set first_name = %(first_name)s, last_name = %(last_name)s, username = %(username)s,
    last_seen_at = %(now)s
from (
    select first_name, last_name, username from users
    where bot_id = %(bot_id)s and user_id = %(user_id)s
    for update
) as previous
where stored.bot_id = %(bot_id)s and stored.user_id = %(user_id)s
returning stored.*,
    (previous.first_name, previous.last_name, previous.username)
        is distinct from (%(first_name)s, %(last_name)s, %(username)s) as display_changed
"""

_INSERT_SQL = """
insert into users (bot_id, user_id, first_name, last_name, username, first_seen_at, last_seen_at)
values (%(bot_id)s, %(user_id)s, %(first_name)s, %(last_name)s, %(username)s, %(now)s, %(now)s)
on conflict (bot_id, user_id) do nothing
returning *, false as display_changed
"""


def _fetch_ensured(cursor: CursorWrapper, *, is_new: bool) -> EnsuredUser | None:
    """The row the statement just run returned (columns by name), or None."""
    row = cursor.fetchone()
    if row is None:
        return None
    values = dict(zip((column.name for column in cursor.description), row, strict=True))
    user = BotUser.from_db(connection.alias, _FIELD_NAMES, [values[name] for name in _FIELD_NAMES])
    return EnsuredUser(user=user, is_new=is_new, display_changed=values["display_changed"])


def user_ensure(
    *, bot_id: int, user_id: int, first_name: str, last_name: str, username: str, now: datetime
) -> EnsuredUser:
    """Refresh ``last_seen_at`` and the names of a known user, else create the user.

    Returns the row as stored now. A returning user (the hot path) costs one statement. Governance
    columns (ban, risk, verification) are never touched here. Two first messages racing:
    ``ON CONFLICT DO NOTHING`` lets exactly one of them be ``is_new``; the other refreshes the
    row the winner inserted. Raises ``BotUser.DoesNotExist`` when the row vanished meanwhile
    (deleted by an admin): the update is retried.
    """
    parameters: dict[str, Any] = {
        "bot_id": bot_id,
        "user_id": user_id,
        "first_name": first_name,
        "last_name": last_name,
        "username": username,
        "now": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(_REFRESH_SQL, parameters)
        ensured = _fetch_ensured(cursor, is_new=False)
        if ensured is None:
            cursor.execute(_INSERT_SQL, parameters)
            ensured = _fetch_ensured(cursor, is_new=True)
        if ensured is None:  # a concurrent first message of the user inserted the row
            cursor.execute(_REFRESH_SQL, parameters)
            ensured = _fetch_ensured(cursor, is_new=False)
    if ensured is None:
        raise BotUser.DoesNotExist(f"user {user_id} of bot {bot_id} vanished while ensured")
    return ensured


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
    """Unverify a verified user and void their pending challenge (TTL expiry, rate-limit
    overflow). False when the user was not verified: nothing is written, so a challenge issued
    to an unverified user stays answerable (verification off: every message over the limit
    lands here, not at the verification gate)."""
    return (
        BotUser.objects.filter(bot_id=bot_id, user_id=user_id, is_verified=True).update(
            **VERIFICATION_CLEARED
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
            status=UserStatus.DELETED, **VERIFICATION_CLEARED
        )
        == 1
    )
    topic_mark_closed(bot_id=bot_id, thread_id=thread_id, now=now)
    return archived
