"""What a broadcast's send loop keeps in Redis beside its row: who is sending, and which
recipient's send was in flight when a loop died.

* **The sender lease** — one send loop per broadcast. A running loop keeps it with a short TTL
  (refreshed every few seconds and before every call), so a dead loop's lease lapses within
  SENDER_LEASE_SECONDS and the resume sweep can start another; a continuation waiting in the
  Celery queue keeps it for its countdown. Correctness never rests on it: the row's claims
  (``bots.services.broadcasts``) already keep two loops from sending to the same recipient.
* **The in-flight marker** — the index being sent (and the success count before it), set before
  the claim and deleted after the outcome is recorded. A loop that finds it pointing at the last
  claimed index, with no success recorded since, knows that send's outcome is unknown (its claim
  counted it as a failure): the final statistics name it so. Display only: after a FLUSHALL
  such a recipient shows as an ordinary failure.
"""

from __future__ import annotations

from django_redis import get_redis_connection

from bots import redis_keys
from bots.clients.telegram import DEFAULT_TIMEOUT as TELEGRAM_CALL_TIMEOUT
from bots.services.redis_leases import lease_acquire, lease_held, lease_hold, lease_release

# A running loop refreshes its lease at least every SENDER_LEASE_REFRESH_SECONDS, and right
# before every Bot API call; between two refreshes it may be inside one call for as long as the
# client's connect + read timeouts allow, so the lease outlives that call with room to spare:
# it never lapses under a live loop (a lapsed lease lets the resume sweep start a second one).
SENDER_LEASE_REFRESH_SECONDS = 3.0
SENDER_LEASE_SECONDS = sum(TELEGRAM_CALL_TIMEOUT) + SENDER_LEASE_REFRESH_SECONDS + 7.0  # 30 s
# Longer than any broadcast runs: a broadcast of 100,000 recipients takes about an hour.
MARKER_TTL_SECONDS = 2 * 24 * 3600


def _redis():
    return get_redis_connection("default")


def sender_lease_take(*, broadcast_id: int, token: str | None, ttl_seconds: float) -> str | None:
    """The sender lease: kept (or taken again if it lapsed) with ``token``, or taken anew when
    ``token`` is None. Its token, or None when another loop holds it."""
    key = redis_keys.broadcast_sender(broadcast_id)
    if token is None:
        return lease_acquire(key, ttl_seconds=ttl_seconds)
    return token if lease_hold(key, token=token, ttl_seconds=ttl_seconds) else None


def sender_lease_hold(*, broadcast_id: int, token: str, ttl_seconds: float) -> bool:
    key = redis_keys.broadcast_sender(broadcast_id)
    return lease_hold(key, token=token, ttl_seconds=ttl_seconds)


def sender_lease_release(*, broadcast_id: int, token: str) -> bool:
    return lease_release(redis_keys.broadcast_sender(broadcast_id), token=token)


def sender_lease_held(*, broadcast_id: int) -> bool:
    return lease_held(redis_keys.broadcast_sender(broadcast_id))


def in_flight_mark(*, broadcast_id: int, index: int, successes: int) -> None:
    """The send to ``index`` starts now; ``successes``: the row's success count before it (so a
    later loop can tell whether its success was recorded)."""
    _redis().set(
        redis_keys.broadcast_in_flight(broadcast_id), f"{index}:{successes}", ex=MARKER_TTL_SECONDS
    )


def in_flight_clear(*, broadcast_id: int) -> None:
    _redis().delete(redis_keys.broadcast_in_flight(broadcast_id))


def in_flight_take(*, broadcast_id: int) -> tuple[int, int] | None:
    """(index, successes before it) a previous loop left in flight, forgotten now; None when
    there is none."""
    value = _redis().getdel(redis_keys.broadcast_in_flight(broadcast_id))
    if value is None:
        return None
    index, _, successes = value.decode().partition(":")
    return int(index), int(successes)


def in_flight_peek(*, broadcast_id: int) -> tuple[int, int] | None:
    """(index, successes before it) of the send in flight now, left in place; None when
    there is none."""
    value = _redis().get(redis_keys.broadcast_in_flight(broadcast_id))
    if value is None:
        return None
    index, _, successes = value.decode().partition(":")
    return int(index), int(successes)


def sends_in_flight(*, broadcast_id: int, success_count: int, failure_count: int) -> int:
    """1 when the row's last claim is a send whose outcome is not recorded yet (its claim
    counted it as a failure meanwhile), else 0."""
    marker = in_flight_peek(broadcast_id=broadcast_id)
    if marker is None or failure_count == 0:
        return 0
    index, successes = marker
    return int(index == success_count + failure_count - 1 and successes == success_count)


def unknown_add(*, broadcast_id: int) -> int:
    key = redis_keys.broadcast_unknown(broadcast_id)
    redis = _redis()
    pipeline = redis.pipeline()
    pipeline.incr(key)
    pipeline.expire(key, MARKER_TTL_SECONDS)
    count, _ = pipeline.execute()
    return int(count)


def unknown_count(*, broadcast_id: int) -> int:
    value = _redis().get(redis_keys.broadcast_unknown(broadcast_id))
    return int(value) if value is not None else 0


def progress_forget(*, broadcast_id: int) -> None:
    """The row is gone: its markers go too (the lease is released by its holder)."""
    _redis().delete(
        redis_keys.broadcast_in_flight(broadcast_id), redis_keys.broadcast_unknown(broadcast_id)
    )
