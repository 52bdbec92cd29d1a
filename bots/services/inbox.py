"""Writes to ``update_inbox`` (issue 36): accepting an update, leasing it, giving it back,
finishing it — each one statement (or one transaction), each deciding on its own conditions.

* ``inbox_store`` — the webhook's one transaction: the ``processed_updates`` claim and the inbox
  row, written together before the webhook answers 200. While the update's conversation has
  rows waiting (or an album being collected), the new row queues behind them; otherwise the
  webhook holds its lease and works on it at once.
* ``inbox_claim_next`` — a worker's lease on the oldest row it may work on now: due
  (``not_before``), free (no lease, or a lease that expired — its holder died), and first of its
  conversation (no earlier row of the same user, no other album of the user being collected).
  One conditional ``UPDATE … RETURNING`` with ``FOR UPDATE SKIP LOCKED``: two workers never hold
  one row, nor two rows of one conversation.
* ``inbox_renew`` — the holder keeps its lease (``bots.services.inbox_lease``, before each
  Bot API call).
* ``inbox_release`` — the holder gives the row back: counted (it failed: MAX_ATTEMPTS) or not
  (it waited for a send permit, a deletion, a 429), with the steps it settled.
* ``inbox_finish`` — the row deleted and the claim marked processed (or failed: poison) in one
  statement, by its holder only.

``processed_updates`` keeps its meaning: one claim per update, ``processing`` while the inbox
holds it, ``attempts`` the failed attempts (a take-over after a failure or a dead holder),
``created_at`` the latest lease; a redelivery of a stored update is a duplicate (never a second
handling), and the 60 s take-over of a stale claim applies only to a claim without an inbox row
(one written before the inbox existed).
"""

from __future__ import annotations

import enum
import hashlib
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from bots.models import InboxUpdate, UpdateStatus
from bots.services.processed_updates import STALE_CLAIM_AFTER

# A holder's lease: renewed at least every LEASE_RENEW_SECONDS while it works (before each Bot
# API call and while it waits for a permit), so it lapses only when the holder died; a call takes
# at most the client's 5 + 15 s, well inside.
LEASE_SECONDS = 60.0
LEASE_RENEW_SECONDS = 10.0
# How much of a row's last error is kept (sanitized Telegram texts are short anyway).
LAST_ERROR_CHARS = 300


class StoreState(enum.StrEnum):
    OWNED = "owned"  # stored, and this request holds the lease: work on it now
    QUEUED = "queued"  # stored behind the conversation's waiting rows: a worker finishes it
    DUPLICATE = "duplicate"  # processed or failed already: nothing to do
    WAITING = "waiting"  # stored by an earlier delivery, not finished yet: nothing to do
    IN_FLIGHT = "in_flight"  # a claim without an inbox row, fresh: a pre-inbox attempt runs


@dataclass(frozen=True)
class Stored:
    state: StoreState
    attempts: int = 0  # OWNED: the failed attempts before this one (a stale claim taken over)


@dataclass(frozen=True)
class LeasedUpdate:
    """A row this process holds the lease of."""

    bot_id: int
    update_id: int
    payload: dict
    conversation_user_id: int | None
    origin: str | None
    attempts: int  # failed attempts before this one
    waits: int  # attempts given back without failing
    settled: frozenset[str]
    token: str
    taken_over: bool = False  # the lease was taken from a holder that died

    @property
    def earlier_attempts(self) -> int:
        """Attempts before this one, of any kind: some of their writes may be done."""
        return self.attempts + self.waits


def new_lease_token() -> str:
    return secrets.token_hex(16)


def _conversation_lock_key(bot_id: int, user_id: int) -> int:
    """A signed 64-bit advisory-lock key of one conversation (stable across processes)."""
    digest = hashlib.blake2b(f"inbox:{bot_id}:{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_STORE_SQL = """
with claim as (
    insert into processed_updates as claimed (bot_id, update_id, status, attempts, created_at)
    values (%(bot_id)s, %(update_id)s, 'processing', 0, %(now)s)
    on conflict (bot_id, update_id) do update
        set attempts = claimed.attempts + 1, created_at = excluded.created_at
        where claimed.status = 'processing' and claimed.created_at < %(stale_before)s
          and not exists (
              select 1 from update_inbox waiting
              where waiting.bot_id = claimed.bot_id and waiting.update_id = claimed.update_id
          )
    returning attempts
),
busy as (
    select %(conversation)s::bigint is not null and (
        exists (
            select 1 from update_inbox earlier
            where earlier.bot_id = %(bot_id)s and earlier.conversation_user_id = %(conversation)s
        )
        or exists (
            select 1 from album_items collected
            where collected.bot_id = %(bot_id)s and collected.user_id = %(conversation)s
              and collected.media_group_id is distinct from %(media_group)s::text
        )
    ) as queued
)
insert into update_inbox (
    bot_id, update_id, conversation_user_id, media_group_id, payload, origin, attempts, waits,
    settled, not_before, lease_token, lease_expires_at, last_error, created_at
)
select %(bot_id)s, %(update_id)s, %(conversation)s, %(media_group)s, %(payload)s, %(origin)s,
       claim.attempts, 0, '[]'::jsonb, %(now)s,
       case when busy.queued then null else %(token)s end,
       case when busy.queued then null else %(lease_until)s::timestamptz end,
       '', %(now)s
from claim, busy
returning attempts, lease_token is not null
"""


def inbox_store(
    *,
    bot_id: int,
    update_id: int,
    payload: dict,
    conversation_user_id: int | None,
    media_group_id: str | None,
    origin: str | None,
    now: datetime,
    token: str,
) -> Stored:
    """Claim the update and store it in the inbox, in one transaction (module docstring).

    The conversation's advisory lock is taken first, so two updates of one user arriving at
    once are ordered: the second sees the first's row and queues behind it. Raises
    DatabaseError when PostgreSQL cannot store it (the webhook answers 500 then)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if conversation_user_id is not None:
            cursor.execute(
                "select pg_advisory_xact_lock(%s)",
                [_conversation_lock_key(bot_id, conversation_user_id)],
            )
        cursor.execute(
            _STORE_SQL,
            {
                "bot_id": bot_id,
                "update_id": update_id,
                "conversation": conversation_user_id,
                "media_group": media_group_id,
                # django-stubs' cursor parameters leave out psycopg's adapters such as Jsonb.
                "payload": Jsonb(payload),  # type: ignore[dict-item]
                "origin": origin,
                "now": now,
                "stale_before": now - STALE_CLAIM_AFTER,
                "token": token,
                "lease_until": now + timedelta(seconds=LEASE_SECONDS),
            },
        )
        row = cursor.fetchone()
        if row is not None:
            attempts, owned = row
            return Stored(StoreState.OWNED if owned else StoreState.QUEUED, attempts=attempts)
        cursor.execute(
            "select status, exists (select 1 from update_inbox where bot_id = %(bot_id)s"
            " and update_id = %(update_id)s) from processed_updates"
            " where bot_id = %(bot_id)s and update_id = %(update_id)s",
            {"bot_id": bot_id, "update_id": update_id},
        )
        found = cursor.fetchone()
    if found is None or found[0] != UpdateStatus.PROCESSING:
        # processed or failed (or, in an unlikely race, trimmed meanwhile): nothing to do.
        return Stored(StoreState.DUPLICATE)
    return Stored(StoreState.WAITING if found[1] else StoreState.IN_FLIGHT)


_CLAIM_SQL = """
with candidate as (
    select row.bot_id, row.update_id, row.lease_token as previous_lease
    from update_inbox row
    where row.bot_id = %(bot_id)s
      and row.not_before <= %(now)s
      and (row.lease_token is null or row.lease_expires_at < %(now)s)
      and (row.conversation_user_id is null or (
          not exists (
              select 1 from update_inbox earlier
              where earlier.bot_id = row.bot_id
                and earlier.conversation_user_id = row.conversation_user_id
                and earlier.update_id < row.update_id
          )
          and not exists (
              select 1 from album_items collected
              where collected.bot_id = row.bot_id
                and collected.user_id = row.conversation_user_id
                and collected.media_group_id is distinct from row.media_group_id
          )
      ))
    order by row.update_id
    limit 1
    for update of row skip locked
),
leased as (
    update update_inbox row
    set lease_token = %(token)s,
        lease_expires_at = %(lease_until)s,
        attempts = row.attempts + case when candidate.previous_lease is null then 0 else 1 end
    from candidate
    where row.bot_id = candidate.bot_id and row.update_id = candidate.update_id
    returning row.update_id, row.payload, row.conversation_user_id, row.origin, row.attempts,
              row.waits, row.settled, candidate.previous_lease is not null
),
touched as (
    update processed_updates claim
    set created_at = %(now)s, attempts = leased.attempts
    from leased
    where claim.bot_id = %(bot_id)s and claim.update_id = leased.update_id
      and claim.status = 'processing'
)
select * from leased
"""


def inbox_claim_next(*, bot_id: int, now: datetime, token: str) -> LeasedUpdate | None:
    """Lease the oldest row of the bot a worker may work on now (module docstring), or None.

    A row whose holder died (its lease expired) is taken over: that attempt counts as failed
    (``attempts`` + 1, on the row and on its ``processed_updates`` claim)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _CLAIM_SQL,
            {
                "bot_id": bot_id,
                "now": now,
                "token": token,
                "lease_until": now + timedelta(seconds=LEASE_SECONDS),
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    update_id, payload, conversation, origin, attempts, waits, settled, taken_over = row
    return LeasedUpdate(
        bot_id=bot_id,
        update_id=update_id,
        payload=_json(payload),
        conversation_user_id=conversation,
        origin=origin,
        attempts=attempts,
        waits=waits,
        settled=frozenset(_json(settled) or ()),
        token=token,
        taken_over=taken_over,
    )


def _json(value: object) -> Any:
    """A jsonb column read by a raw query: Django's psycopg setup hands it over as text."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def inbox_leased_by_store(
    *,
    bot_id: int,
    update_id: int,
    payload: dict,
    conversation_user_id: int | None,
    origin: str | None,
    attempts: int,
    token: str,
) -> LeasedUpdate:
    """The row ``inbox_store`` just wrote with this request's lease."""
    return LeasedUpdate(
        bot_id=bot_id,
        update_id=update_id,
        payload=payload,
        conversation_user_id=conversation_user_id,
        origin=origin,
        attempts=attempts,
        waits=0,
        settled=frozenset(),
        token=token,
    )


def inbox_renew(*, leased: LeasedUpdate, now: datetime) -> bool:
    """Extend the lease from ``now``; False when it is no longer this holder's."""
    renewed = InboxUpdate.objects.filter(
        bot_id=leased.bot_id, update_id=leased.update_id, lease_token=leased.token
    ).update(lease_expires_at=now + timedelta(seconds=LEASE_SECONDS))
    return renewed == 1


_RELEASE_SQL = """
with released as (
    update update_inbox
    set lease_token = null, lease_expires_at = null, not_before = %(not_before)s,
        attempts = attempts + %(counted)s, waits = waits + 1 - %(counted)s,
        settled = %(settled)s, last_error = %(error)s
    where bot_id = %(bot_id)s and update_id = %(update_id)s and lease_token = %(token)s
    returning attempts
),
counted as (
    update processed_updates claim set attempts = released.attempts
    from released
    where claim.bot_id = %(bot_id)s and claim.update_id = %(update_id)s
      and claim.status = 'processing' and %(counted)s = 1
)
select count(*) from released
"""


def inbox_release(
    *,
    leased: LeasedUpdate,
    not_before: datetime,
    counted: bool,
    settled: Iterable[str] = (),
    error: str = "",
) -> bool:
    """Give the row back for a later attempt, not before ``not_before``. ``counted``: this
    attempt failed (toward MAX_ATTEMPTS, on the row and its claim); otherwise it only waited.
    ``settled``: the steps settled so far (kept for the next attempt). False when this holder
    no longer had the lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RELEASE_SQL,
            {
                "bot_id": leased.bot_id,
                "update_id": leased.update_id,
                "token": leased.token,
                "not_before": not_before,
                "counted": 1 if counted else 0,
                # django-stubs' cursor parameters leave out psycopg's adapters such as Jsonb.
                "settled": Jsonb(sorted(set(settled) | leased.settled)),  # type: ignore[dict-item]
                "error": error[:LAST_ERROR_CHARS],
            },
        )
        (released,) = cursor.fetchone()
    return released == 1


@dataclass(frozen=True)
class Finished:
    owned: bool  # False: the lease was not this holder's any more (nothing was changed)
    more_in_conversation: bool = False  # the conversation has rows waiting behind this one


_FINISH_SQL = """
with gone as (
    delete from update_inbox
    where bot_id = %(bot_id)s and update_id = %(update_id)s and lease_token = %(token)s
    returning conversation_user_id
),
settled as (
    update processed_updates claim set status = %(status)s
    where claim.bot_id = %(bot_id)s and claim.update_id = %(update_id)s
      and claim.status = 'processing' and exists (select 1 from gone)
)
select
    (select count(*) from gone),
    exists (
        select 1 from update_inbox behind, gone
        where behind.bot_id = %(bot_id)s
          and behind.conversation_user_id = gone.conversation_user_id
          and behind.update_id <> %(update_id)s
    )
"""


def inbox_finish(*, leased: LeasedUpdate, status: UpdateStatus) -> Finished:
    """The update is done: delete its row and mark its claim ``status`` (processed, or failed
    for poison), in one statement — only while this holder has the lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            _FINISH_SQL,
            {
                "bot_id": leased.bot_id,
                "update_id": leased.update_id,
                "token": leased.token,
                "status": status,
            },
        )
        owned, more = cursor.fetchone()
    return Finished(owned=owned == 1, more_in_conversation=bool(more))
