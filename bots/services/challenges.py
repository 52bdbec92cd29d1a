"""Writes of the challenge fence on ``users`` (spec §5.3, §5.4, §5.5).

The fence is ``verify_request_hash`` + ``verify_request_generation``: a challenge is issued by
reserving a fresh hash, attached to its Telegram message once sent, and completed or voided only
by statements that still find that same hash and generation.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Exists, Q, QuerySet

from bots.models import BotUser, Setting
from bots.selectors import VERIFICATION_KEYS, VerificationSettings
from bots.services.users import PENDING_CHALLENGE_CLEARED


def _switches_unchanged(snapshot: VerificationSettings, keys: Iterable[str]) -> list:
    """Conditions "each of ``keys`` still holds what ``snapshot`` read" (a missing row included).

    Evaluated inside the UPDATE itself, so a concurrent /verifymode change cannot slip between
    reading the switches and writing the fence.
    """
    conditions = []
    for key in keys:
        rows = Setting.objects.filter(key=key)
        stored = snapshot.stored[key]
        conditions.append(
            Exists(rows.filter(value=stored)) if stored is not None else ~Exists(rows)
        )
    return conditions


def challenge_reserve(
    *,
    bot_id: int,
    user_id: int,
    request_hash: str,
    snapshot: VerificationSettings,
    expires_at: datetime | None = None,
) -> bool:
    """Reserve a new challenge for the user, voiding any previous one.

    Writes the hash, the snapshot's generation and ``expires_at`` (Turnstile only) and clears
    the answer, message id and submit throttle — only while the user is neither banned nor
    verified and the switches are still the snapshot's. False: abandon silently.
    """
    return (
        BotUser.objects.filter(
            *_switches_unchanged(snapshot, VERIFICATION_KEYS),
            bot_id=bot_id,
            user_id=user_id,
            is_banned=False,
            is_verified=False,
        ).update(
            verify_request_hash=request_hash,
            verify_request_expires_at=expires_at,
            verify_request_generation=snapshot.generation,
            verify_answer=None,
            verify_msg_id=None,
            verify_submit_not_before=None,
        )
        == 1
    )


def _fenced(*, bot_id: int, user_id: int, request_hash: str, generation: int) -> QuerySet:
    """The user's row, only while its fence is still ``request_hash`` + ``generation``."""
    return BotUser.objects.filter(
        bot_id=bot_id,
        user_id=user_id,
        verify_request_hash=request_hash,
        verify_request_generation=generation,
    )


def challenge_release(*, bot_id: int, user_id: int, request_hash: str, generation: int) -> bool:
    """Void the challenge after its message could not be sent, if the fence is still ours."""
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=generation
    )
    return fenced.update(**PENDING_CHALLENGE_CLEARED) == 1


def challenge_restore(
    *,
    bot_id: int,
    user_id: int,
    request_hash: str,
    generation: int,
    previous_hash: str,
    previous_answer: int | None,
    message_id: int,
) -> bool:
    """Put back the challenge shown in ``message_id`` (its hash and answer) in place of the
    reserved ``request_hash``, if that fence is still ours and the user still unverified (CAS).

    For a re-issue whose edit failed retryably: the message still shows the old challenge, and
    the redelivery's pre-check must find it live to run the re-issue again.
    """
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=generation
    )
    return (
        fenced.filter(is_banned=False, is_verified=False).update(
            verify_request_hash=previous_hash,
            verify_answer=previous_answer,
            verify_msg_id=message_id,
        )
        == 1
    )


def challenge_attach(
    *,
    bot_id: int,
    user_id: int,
    request_hash: str,
    generation: int,
    message_id: int,
    answer: int | None,
) -> bool:
    """Store the sent challenge's message id and answer, if the fence is still ours (CAS)."""
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=generation
    )
    return (
        fenced.filter(is_verified=False).update(verify_msg_id=message_id, verify_answer=answer) == 1
    )


def user_verify(
    *,
    bot_id: int,
    user_id: int,
    message_id: int,
    answer: int,
    request_hash: str,
    snapshot: VerificationSettings,
    now: datetime,
) -> bool:
    """Mark the user verified for a right answer; True for the one statement that wins.

    Requires the clicked message, the answer, the fence at the snapshot's generation, not
    banned, not yet verified, and the switches the pre-check saw — mode, switch and generation:
    a challenge issued under an older generation never completes, even one whose columns a
    concurrent switch change missed. Clears the pending challenge in the same statement.
    """
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=snapshot.generation
    )
    return (
        fenced.filter(
            *_switches_unchanged(snapshot, VERIFICATION_KEYS),
            verify_msg_id=message_id,
            verify_answer=answer,
            is_banned=False,
            is_verified=False,
        ).update(is_verified=True, verified_at=now, **PENDING_CHALLENGE_CLEARED)
        == 1
    )


# ------------------------------------------------------------------ Turnstile submits (spec §5.5)

# One Siteverify call per request per 15 s, across every web process (seed: the throttle is
# claimed by one conditional UPDATE).
SUBMIT_INTERVAL = timedelta(seconds=15)


def turnstile_submit_claim(
    *, bot_id: int, user_id: int, request_hash: str, generation: int, now: datetime
) -> datetime | None:
    """Claim the 15 s submit window of the user's Turnstile request; the claimed
    ``verify_submit_not_before`` (now + 15 s), or None when the window is still running or the
    request is no longer live (another hash or generation, expired, banned, verified).

    A failed submit keeps its window (it never ends a cool-down early), and a new challenge
    clears it (its reserve resets the column).
    """
    not_before = now + SUBMIT_INTERVAL
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=generation
    )
    claimed = (
        fenced.filter(
            Q(verify_submit_not_before__isnull=True) | Q(verify_submit_not_before__lte=now),
            verify_request_expires_at__gt=now,
            is_banned=False,
            is_verified=False,
        ).update(verify_submit_not_before=not_before)
        == 1
    )
    return not_before if claimed else None


def turnstile_user_verify(
    *,
    bot_id: int,
    user_id: int,
    request_hash: str,
    snapshot: VerificationSettings,
    claimed_not_before: datetime,
    now: datetime,
) -> bool:
    """Mark the user verified after Cloudflare accepted the token; True for the one statement
    that wins.

    Requires the request's fence at the snapshot's generation, unexpired at ``now``, the submit
    window this request claimed (a later submit of the same request that claimed a new window
    wins instead), not banned, not verified, and the switches the submit read (Turnstile, on).
    Clears the pending challenge in the same statement.
    """
    fenced = _fenced(
        bot_id=bot_id, user_id=user_id, request_hash=request_hash, generation=snapshot.generation
    )
    return (
        fenced.filter(
            *_switches_unchanged(snapshot, VERIFICATION_KEYS),
            verify_request_expires_at__gt=now,
            verify_submit_not_before=claimed_not_before,
            is_banned=False,
            is_verified=False,
        ).update(is_verified=True, verified_at=now, **PENDING_CHALLENGE_CLEARED)
        == 1
    )
