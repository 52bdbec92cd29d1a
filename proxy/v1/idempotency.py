"""``Idempotency-Key`` on non-stream ``/v1/responses`` and ``/v1/chat/completions`` (issue 25,
peers.md B.4): a client that retries a call — its connection dropped, its timeout fired — with
the same key and the same body gets the stored answer instead of spending quota twice.

Per client key and idempotency key (hashed: the header's value never becomes a key name), Redis
holds one record (seed 004 §2.9: disposable — a flush only costs the dedupe):

* ``pending`` while the first call runs (TTL ``IDEMPOTENCY_PENDING_SECONDS``, so a crashed
  worker's claim lapses): a second call meanwhile is 409 ``idempotency_request_in_progress``
  with ``Retry-After: 1``;
* ``done`` with the answer (status 200, its body and safe headers; TTL ``IDEMPOTENCY_TTL_SECONDS``):
  a retry gets it back with ``idempotent-replayed: true``, no upstream call and no ledger row;
* a failed call (any error answer, the client leaving) gives the claim back: a retry runs anew
  (an error answer spent no quota);
* the same key with a different body (or route) is 409 ``idempotency_key_reused``.

Streams ignore the header (their answer is not a value that can be replayed byte for byte).
An answer larger than ``IDEMPOTENCY_MAX_STORED_BYTES`` is not stored (the claim is given back).
Redis unavailable: the call runs without the dedupe (logged, never refused for it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from proxy import redis_keys
from proxy.dispatch.client_errors import ClientError, ClientFailure
from proxy.loop_resources import async_redis
from proxy.v1.common import SAFE_UPSTREAM_HEADERS

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


def _fingerprint(route: str, body: dict) -> str:
    """The request as parsed (keys sorted: the same JSON however it was spaced or ordered)."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(route.encode() + b"\0" + canonical.encode()).hexdigest()


def _record(state: str, fingerprint: str, **answer) -> str:
    return json.dumps({"state": state, "fingerprint": fingerprint, **answer})


def _replay(record: dict, request_id: str) -> HttpResponse:
    response = HttpResponse(
        record["body"].encode(), status=record["status"], content_type="application/json"
    )
    for name, value in record.get("headers", {}).items():
        response[name] = value
    response["x-request-id"] = request_id
    response[REPLAYED_HEADER] = "true"
    return response


async def _claim(key: str, fingerprint: str) -> dict | None:
    """None when this call holds the claim now; else the record found. Raises on Redis
    failures (the caller runs without the dedupe)."""
    redis = await async_redis.get()
    claimed = await redis.set(
        key, _record(_PENDING, fingerprint), nx=True, ex=settings.IDEMPOTENCY_PENDING_SECONDS
    )
    if claimed:
        return None
    raw = await redis.get(key)
    if raw is None:  # lapsed between the two calls: claim again, once
        claimed = await redis.set(
            key, _record(_PENDING, fingerprint), nx=True, ex=settings.IDEMPOTENCY_PENDING_SECONDS
        )
        return None if claimed else {"state": _PENDING, "fingerprint": fingerprint}
    return json.loads(raw)


async def _give_back(key: str) -> None:
    try:
        redis = await async_redis.get()
        await redis.delete(key)
    except Exception as error:  # the claim lapses on its own
        logger.warning("idempotency: claim not given back: %s", type(error).__name__)


async def _store(key: str, fingerprint: str, response: HttpResponse) -> None:
    body = response.content
    if len(body) > settings.IDEMPOTENCY_MAX_STORED_BYTES:
        await _give_back(key)
        return
    headers = {name: response[name] for name in SAFE_UPSTREAM_HEADERS if name in response}
    record = _record(
        _DONE, fingerprint, status=response.status_code, body=body.decode(), headers=headers
    )
    try:
        redis = await async_redis.get()
        await redis.set(key, record, ex=settings.IDEMPOTENCY_TTL_SECONDS)
    except Exception as error:
        logger.warning("idempotency: answer not stored: %s", type(error).__name__)


async def idempotent(
    request: HttpRequest,
    *,
    route: str,
    key_id: str,
    request_id: str,
    body: dict,
    produce: Callable[[], Awaitable[HttpResponse]],
) -> HttpResponse:
    """``produce()`` once per (client key, Idempotency-Key); without the header, just it."""
    value = request.headers.get(HEADER)
    if value is None:
        return await produce()
    if not _VALID_KEY.fullmatch(value):
        raise ClientFailure(INVALID_KEY)
    key = redis_keys.idempotency(key_id, hashlib.sha256(value.encode()).hexdigest())
    fingerprint = _fingerprint(route, body)
    try:
        found = await _claim(key, fingerprint)
    except Exception as error:
        logger.warning("idempotency unavailable, the call runs as is: %s", type(error).__name__)
        return await produce()
    if found is not None:
        if found.get("fingerprint") != fingerprint:
            raise ClientFailure(KEY_REUSED)
        if found.get("state") == _DONE:
            return _replay(found, request_id)
        raise ClientFailure(IN_PROGRESS, retry_after=1)
    try:
        response = await produce()
    except BaseException:
        await asyncio.shield(_give_back(key))
        raise
    if response.status_code == 200:
        await _store(key, fingerprint, response)
    else:
        await _give_back(key)
    return response
