"""Writes to ``processed_updates``: the idempotency claim of each Telegram update (spec §6)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django_redis import get_redis_connection
from redis.exceptions import RedisError

from bots import redis_keys
from bots.models import Bot, ProcessedUpdate, UpdateStatus
from bots.selectors import processed_update_status

logger = logging.getLogger(__name__)

# A `processing` claim older than this is a crashed attempt that the next delivery takes over.
STALE_CLAIM_AFTER = timedelta(seconds=60)
# Telegram stops redelivering an update long before this; older rows only take space.
RETENTION = timedelta(days=7)
# How long the record of an update's attempts that got no send permit is kept (Telegram stops
# redelivering an update within a day).
GIVEN_BACK_TTL_SECONDS = 24 * 3600
UNSENT_FIELD = "unsent"


class ClaimState(enum.StrEnum):
    OWNED = "owned"  # this request processes the update
    DUPLICATE = "duplicate"  # already processed or failed: answer 200, do nothing
    IN_FLIGHT = "in_flight"  # another request holds a fresh claim: answer 500, Telegram retries


@dataclass(frozen=True)
class UpdateClaim:
    state: ClaimState
    attempts: int | None = None  # the owner's attempt number (0 for the first delivery)


_CLAIM_SQL = """
insert into processed_updates as claimed (bot_id, update_id, status, attempts, created_at)
values (%(bot_id)s, %(update_id)s, 'processing', 0, %(now)s)
on conflict (bot_id, update_id) do update
    set attempts = claimed.attempts + 1, created_at = excluded.created_at
    where claimed.status = 'processing' and claimed.created_at < %(stale_before)s
returning attempts
"""


def processed_update_claim(*, bot_id: int, update_id: int, now: datetime) -> UpdateClaim:
    """Claim ``update_id``: a new row (attempts 0), or a take-over of a stale claim (attempts+1).

    One ``INSERT … ON CONFLICT … DO UPDATE … WHERE`` statement decides: a returned row means
    this request owns the update. Only a ``processing`` row older than 60 s is taken over;
    ``processed``/``failed`` rows are never reclaimed (so a finished update cannot run again even
    when two deliveries race), and a fresh ``processing`` row means in-flight.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _CLAIM_SQL,
            {
                "bot_id": bot_id,
                "update_id": update_id,
                "now": now,
                "stale_before": now - STALE_CLAIM_AFTER,
            },
        )
        row = cursor.fetchone()
    if row is not None:
        return UpdateClaim(ClaimState.OWNED, attempts=row[0])
    status = processed_update_status(bot_id=bot_id, update_id=update_id)
    if status == UpdateStatus.PROCESSING:
        return UpdateClaim(ClaimState.IN_FLIGHT)
    # processed or failed (or, in an unlikely race, trimmed meanwhile): nothing to do.
    return UpdateClaim(ClaimState.DUPLICATE)


def _owned_claim(*, bot_id: int, update_id: int, attempts: int):
    """The claim row while this attempt still owns it: after a take-over the newer attempt
    owns the row (its ``attempts`` is higher), and only the owner may settle or release it."""
    return ProcessedUpdate.objects.filter(
        bot_id=bot_id, update_id=update_id, status=UpdateStatus.PROCESSING, attempts=attempts
    )


def _settle(*, bot_id: int, update_id: int, attempts: int, status: UpdateStatus) -> bool:
    owned = _owned_claim(bot_id=bot_id, update_id=update_id, attempts=attempts)
    return owned.update(status=status) == 1


def processed_update_mark_processed(*, bot_id: int, update_id: int, attempts: int) -> bool:
    """Mark the claimed update processed; False when this attempt no longer owns it."""
    return _settle(
        bot_id=bot_id, update_id=update_id, attempts=attempts, status=UpdateStatus.PROCESSED
    )


def processed_update_mark_failed(*, bot_id: int, update_id: int, attempts: int) -> bool:
    """Mark a poison update failed (skipped forever); False when this attempt no longer owns it."""
    return _settle(
        bot_id=bot_id, update_id=update_id, attempts=attempts, status=UpdateStatus.FAILED
    )


def processed_update_release(
    *, bot_id: int, update_id: int, attempts: int, now: datetime, settled: Iterable[str] = ()
) -> bool:
    """Give up this attempt's claim because a call of it got no send permit (the outbound
    limiter had none within the update's budget, so that call was not made): the next delivery
    takes the update over at once instead of after 60 s, and this attempt is not counted toward
    MAX_ATTEMPTS — under a burst an update may wait through many deliveries for its turn in the
    support group (20 messages a minute), and waiting is not failing.

    The claim stays ``processing`` with its ``attempts``: the take-over adds one as always, so
    the next attempt knows an earlier one ran (``is_redelivery``); the attempts given up this
    way are counted apart in Redis and subtracted by the poison check, beside the pipeline
    steps they settled (``settled``: the card, the rate count; ``processed_update_given_back``)
    so that a redelivery does not repeat them. The record is written first, so the delivery
    that takes the claim over finds it (an attempt whose claim was meanwhile taken over after
    60 s is still recorded: it too only waited). Returns False when this attempt no longer owns
    the claim."""
    key = redis_keys.update_given_back(bot_id, update_id)
    try:
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        pipeline.hincrby(key, UNSENT_FIELD, 1)
        for step in settled:
            pipeline.hset(key, step, 1)
        pipeline.expire(key, GIVEN_BACK_TTL_SECONDS)
        pipeline.execute()
    except RedisError:
        # Without the record this attempt counts toward MAX_ATTEMPTS, as any other, and the
        # next one repeats the steps (a redundant card edit, the message counted twice).
        logger.warning("update %s: could not record an attempt without a permit", update_id)
    owned = _owned_claim(bot_id=bot_id, update_id=update_id, attempts=attempts)
    return owned.update(created_at=now - STALE_CLAIM_AFTER - timedelta(seconds=1)) == 1


@dataclass(frozen=True)
class GivenBack:
    """The attempts of an update given back for want of a send permit."""

    attempts: int = 0
    settled: frozenset[str] = frozenset()  # the pipeline steps one of them settled


def processed_update_given_back(*, bot_id: int, update_id: int) -> GivenBack:
    """What ``processed_update_release`` recorded for the update (nothing when Redis does not
    say: then every attempt counts and the steps are repeated, the cautious reading)."""
    try:
        record = get_redis_connection("default").hgetall(
            redis_keys.update_given_back(bot_id, update_id)
        )
        fields = {name.decode(): value for name, value in record.items()}
        return GivenBack(
            attempts=max(0, int(fields.pop(UNSENT_FIELD, 0))),
            settled=frozenset(name for name, value in fields.items() if value == b"1"),
        )
    except (RedisError, ValueError, UnicodeDecodeError):
        return GivenBack()


def processed_update_trim(*, now: datetime) -> int:
    """Delete the claims older than seven days, bot by bot; return how many were deleted."""
    cutoff = now - RETENTION
    deleted = 0
    for bot_id in Bot.objects.values_list("bot_id", flat=True):
        count, _ = ProcessedUpdate.objects.filter(bot_id=bot_id, created_at__lt=cutoff).delete()
        deleted += count
    return deleted
