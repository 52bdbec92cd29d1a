"""``Idempotency-Key`` on non-stream ``/v1/responses`` and ``/v1/chat/completions`` (issue 25,
peers.md B.4; issue 34 item 9): a client that retries a call — its connection dropped, its
timeout fired — with the same key and the same body gets the stored answer instead of
spending quota twice.

Per client key and idempotency key (hashed: the header's value never becomes a key name), Redis
holds one record (seed 004 §2.9: disposable — a flush only costs the dedupe):

* ``pending`` while the first call runs, with a random owner token: TTL
  ``IDEMPOTENCY_PENDING_SECONDS``, extended every third of it while the call runs (a call
  longer than that keeps its claim; a crashed worker's claim lapses); a second call meanwhile
  is 409 ``idempotency_request_in_progress`` with ``Retry-After: 1``;
* ``done`` with the answer (status 200, its body and safe headers; TTL ``IDEMPOTENCY_TTL_SECONDS``):
  a retry gets it back with ``idempotent-replayed: true``, no upstream call and no ledger row;
* a call that failed (any error answer) gives the claim back: a retry runs anew (an error
  answer spent no quota);
* the same key with a different body (or route) is 409 ``idempotency_key_reused``.

The call runs in a task of its own, which the client's leaving (the /v1 handler cancels the
view) does not cancel: it finishes and its answer is stored, so the retry gets it instead of a
second upstream call. Only a graceful stop ends it (the claim is then given back). Every write
after the claim (store, extend, give back) is a Lua compare on the claim's exact value: a claim
that lapsed and was taken by another request is never overwritten, extended or deleted (a
record that is simply gone — a FLUSHALL — is taken back by the call still running).

Streams ignore the header (their answer is not a value that can be replayed byte for byte).
An answer larger than ``IDEMPOTENCY_MAX_STORED_BYTES`` is not stored (the claim is given back).
Redis unavailable: the call runs without the dedupe (logged, never refused for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from redis.commands.core import AsyncScript

from common.redis_scripts import COMPARE_AND_DELETE, lua_script
from proxy import redis_keys
from proxy.dispatch.dispatcher import SAFE_UPSTREAM_HEADERS
from proxy.domain.client_errors import ClientError, ClientFailure
from proxy.domain.sse import SERVER_SHUTDOWN
from proxy.loop_resources import async_redis

logger = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "idempotent-replayed"
# Visible ASCII, 1..255 characters (what Stripe and OpenAI's SDKs send: UUIDs and the like).
_VALID_KEY = re.compile(r"[\x21-\x7e]{1,255}")

INVALID_KEY = ClientError(
    400,
    "invalid_request_error",
    "invalid_idempotency_key",
    "Idempotency-Key must be 1 to 255 visible ASCII characters",
)
KEY_REUSED = ClientError(
    409,
    "invalid_request_error",
    "idempotency_key_reused",
    "This Idempotency-Key was already used with a different request",
)
IN_PROGRESS = ClientError(
    409,
    "invalid_request_error",
    "idempotency_request_in_progress",
    "A request with this Idempotency-Key is still running; retry shortly",
)

_PENDING = "pending"
_DONE = "done"


def _fingerprint(route: str, body: dict[str, Any]) -> str:
    """The request as parsed (keys sorted: the same JSON however it was spaced or ordered)."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(route.encode() + b"\0" + canonical.encode()).hexdigest()


def _record(state: str, fingerprint: str, **answer: Any) -> str:
    return json.dumps({"state": state, "fingerprint": fingerprint, **answer})


def _replay(record: dict[str, Any], request_id: str) -> HttpResponse:
    response = HttpResponse(
        record["body"].encode(), status=record["status"], content_type="application/json"
    )
    for name, value in record.get("headers", {}).items():
        response[name] = value
    response["x-request-id"] = request_id
    response[REPLAYED_HEADER] = "true"
    return response


# KEYS[1] the record; ARGV[1] this call's pending claim (the exact value it wrote), then:
# store — ARGV[2] the answer's record, ARGV[3] its TTL (s); extend — ARGV[2] the claim's TTL (s).
# Each acts only while the record is still this call's claim, or is gone (a FLUSHALL: the call
# still running takes it back): a claim another request took is never overwritten, extended or
# deleted (seed §2.9.3).
_STORE = lua_script("proxy", "idempotency_store")
_EXTEND = lua_script("proxy", "idempotency_extend")
# No client of their own: each call passes one (redis-py's stubs want one here all the same).
_SCRIPTS = {
    name: AsyncScript(None, source.encode())  # type: ignore[arg-type]
    for name, source in (("store", _STORE), ("give_back", COMPARE_AND_DELETE), ("extend", _EXTEND))
}

# The calls that run on after their client left (strong references: the loop keeps only weak
# ones), so that a graceful stop can end them.
_detached: set[asyncio.Task[HttpResponse]] = set()


class Claim:
    """One call's claim on a record: ``pending`` is the exact value it wrote (with a random
    owner token), which every later write compares before it acts."""

    def __init__(self, key: str, fingerprint: str) -> None:
        self.key = key
        self.pending = _record(_PENDING, fingerprint, owner=secrets.token_hex(16))
        self._timer: asyncio.TimerHandle | None = None
        self._extending: asyncio.Task[None] | None = None

    async def take(self) -> dict[str, Any] | None:
        """None when this call holds the claim now; else the record found. Raises on Redis
        failures (the caller runs without the dedupe)."""
        redis = await async_redis.get()
        ttl = settings.IDEMPOTENCY_PENDING_SECONDS
        if await redis.set(self.key, self.pending, nx=True, ex=ttl):
            return None
        raw = await redis.get(self.key)
        if raw is None:  # lapsed between the two calls: claim again, once
            if await redis.set(self.key, self.pending, nx=True, ex=ttl):
                return None
            found: dict[str, Any] = json.loads(self.pending)  # another call claimed it meanwhile
            return found
        found = json.loads(raw)
        return found

    async def _script(self, name: str, *args: str | int) -> int:
        redis = await async_redis.get()
        acted: int = await _SCRIPTS[name](keys=[self.key], args=[self.pending, *args], client=redis)
        return acted

    async def give_back(self) -> None:
        """Delete the claim if it is still this call's. Never raises (it lapses anyway)."""
        try:
            await self._script("give_back")
        except Exception as error:
            logger.warning("idempotency: claim not given back: %s", type(error).__name__)

    async def store(self, fingerprint: str, response: HttpResponse) -> None:
        """Replace the claim by the answer, if the claim is still this call's (too large an
        answer gives the claim back instead). Never raises."""
        body = response.content
        if len(body) > settings.IDEMPOTENCY_MAX_STORED_BYTES:
            await self.give_back()
            return
        headers = {name: response[name] for name in SAFE_UPSTREAM_HEADERS if name in response}
        record = _record(
            _DONE, fingerprint, status=response.status_code, body=body.decode(), headers=headers
        )
        try:
            stored = await self._script("store", record, settings.IDEMPOTENCY_TTL_SECONDS)
        except Exception as error:
            logger.warning("idempotency: answer not stored: %s", type(error).__name__)
            return
        if not stored:
            logger.warning("idempotency: another request holds the key now; answer not stored")

    # -- keeping the claim while the call runs (however long it takes)

    def keep(self) -> None:
        """Extend the claim's TTL every third of it until ``release_hold()``: a call longer
        than ``IDEMPOTENCY_PENDING_SECONDS`` keeps its claim; a crashed worker's lapses."""
        self._timer = asyncio.get_running_loop().call_later(self._every(), self._fire)

    def release_hold(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @staticmethod
    def _every() -> float:
        return settings.IDEMPOTENCY_PENDING_SECONDS / 3

    def _fire(self) -> None:
        if self._extending is None or self._extending.done():
            self._extending = asyncio.get_running_loop().create_task(self._extend())
        self._timer = asyncio.get_running_loop().call_later(self._every(), self._fire)

    async def _extend(self) -> None:
        try:
            await self._script("extend", settings.IDEMPOTENCY_PENDING_SECONDS)
        except Exception as error:  # the next one tries again; the TTL is three of them
            logger.warning("idempotency: claim not extended: %s", type(error).__name__)


async def _run_claimed(
    claim: Claim, fingerprint: str, produce: Callable[[], Awaitable[HttpResponse]]
) -> HttpResponse:
    """``produce()`` under ``claim``: its 200 answer stored, anything else (an error answer, an
    exception, a cancellation at a graceful stop) gives the claim back."""
    claim.keep()
    try:
        response = await produce()
    except BaseException:
        claim.release_hold()
        await asyncio.shield(claim.give_back())
        raise
    claim.release_hold()
    if response.status_code == 200:
        await claim.store(fingerprint, response)
    else:
        await claim.give_back()
    return response


def _forget(call: asyncio.Task[HttpResponse]) -> None:
    _detached.discard(call)
    if not call.cancelled():
        call.exception()  # retrieved: an error answer nobody waits for any more is no log line


async def end_detached_calls(timeout: float) -> int:
    """At a graceful stop: cancel the calls still running for clients that left (their claims
    are given back, their slots released, their ledger entries handed over) and wait at most
    ``timeout`` s for them to unwind. Returns how many were still running."""
    calls = [call for call in _detached if not call.done()]
    for call in calls:
        call.cancel(SERVER_SHUTDOWN)
    if not calls:
        return 0
    _, pending = await asyncio.wait(calls, timeout=timeout)
    return len(pending)


async def idempotent(
    request: HttpRequest,
    *,
    route: str,
    key_id: str,
    request_id: str,
    body: dict[str, Any],
    produce: Callable[[], Awaitable[HttpResponse]],
) -> HttpResponse:
    """``produce()`` once per (client key, Idempotency-Key); without the header, just it.

    With the header the call runs in a task of its own: a client that leaves (the /v1
    handler cancels the view) does not cancel it, and its answer is stored for the retry."""
    value = request.headers.get(HEADER)
    if value is None:
        return await produce()
    if not _VALID_KEY.fullmatch(value):
        raise ClientFailure(INVALID_KEY)
    key = redis_keys.idempotency(key_id, hashlib.sha256(value.encode()).hexdigest())
    fingerprint = _fingerprint(route, body)
    claim = Claim(key, fingerprint)
    try:
        found = await claim.take()
    except Exception as error:
        logger.warning("idempotency unavailable, the call runs as is: %s", type(error).__name__)
        return await produce()
    if found is not None:
        if found.get("fingerprint") != fingerprint:
            raise ClientFailure(KEY_REUSED)
        if found.get("state") == _DONE:
            return _replay(found, request_id)
        raise ClientFailure(IN_PROGRESS, retry_after=1)
    call = asyncio.get_running_loop().create_task(_run_claimed(claim, fingerprint, produce))
    _detached.add(call)
    call.add_done_callback(_forget)
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError as cancelled:
        if cancelled.args == (SERVER_SHUTDOWN,):
            # The process is stopping: the call goes with it (its claim given back, so the
            # client's retry runs it anew elsewhere).
            call.cancel(SERVER_SHUTDOWN)
            with contextlib.suppress(BaseException):
                await call
        raise
