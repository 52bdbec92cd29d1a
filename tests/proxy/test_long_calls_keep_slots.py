"""Long calls keep their slots (issue 34 item 6): a call that runs longer than the slot TTL —
a non-stream ``/v1/responses`` read, a compact, a non-stream chat call, a stream that pauses —
still holds its account slot and its key's in-flight entry, so neither
``max_concurrent_per_account`` nor the key's concurrency can be exceeded while it runs.

Slots and in-flight entries older than ``SCHEDULER_SLOT_TTL_SECONDS`` count as a crashed
worker's and are dropped by the next acquire or admission (``tests/proxy/test_scheduler.py::
test_a_crashed_workers_slot_is_reclaimed_after_the_ttl``); the original (2.0.0) has no such
test: its stale-slot TTL let streams longer than 5 minutes stop counting (spec §10, known issue
8), which is what this closes for every call kind.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
import requests
from django.utils import timezone

from proxy import redis_keys
from proxy.models import RuntimeSettings
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account

SLOT_TTL_SECONDS = 2
# The first call runs 2.5 slot TTLs; the others arrive when it has run 1.5 of them.
LONG_CALL_SECONDS = 5.0
ARRIVE_AFTER_SECONDS = 3.0

CALLS = {
    "responses stream:false": (
        "/v1/responses",
        {"model": "gpt-5.4", "input": "hi", "stream": False},
        Reply(first_byte_delay=LONG_CALL_SECONDS),
    ),
    "compact": (
        "/v1/responses/compact",
        {"model": "gpt-5.4", "input": [{"role": "user", "content": "hi"}]},
        Reply(first_byte_delay=LONG_CALL_SECONDS),
    ),
    "non-stream chat": (
        "/v1/chat/completions",
        {"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]},
        Reply(first_byte_delay=LONG_CALL_SECONDS),
    ),
    # Committed at its first delta (2.5 s), then silent for another 2.5 s: the pause after
    # the commit is longer than the TTL too.
    "stream pausing longer than the TTL": (
        "/v1/responses",
        {"model": "gpt-5.4", "input": "hi"},
        Reply(deltas=2, delta_delay=LONG_CALL_SECONDS / 2),
    ),
}


def _post(proxy, key, path: str, body: dict) -> requests.Response:
    return requests.post(
        f"{proxy.url}{path}",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {key.key}", "Content-Type": "application/json"},
        timeout=90,
    )


def _upstream_path(path: str) -> str:
    """The upstream path a client route calls."""
    return "/codex/responses/compact" if path.endswith("/compact") else "/codex/responses"


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_longer_than_the_slot_ttl_keeps_the_account_cap_and_the_key_concurrency(
    proxy, upstream, client_key, settings, call
):
    settings.SCHEDULER_SLOT_TTL_SECONDS = SLOT_TTL_SECONDS
    RuntimeSettings.objects.update(max_concurrent_per_account=1, request_interval_ms=0)
    account = make_pool_account("tok-long")
    path, body, long_reply = CALLS[call]
    upstream.program("tok-long", long_reply, Reply())
    key_policy_set(
        key=client_key, values=PolicyValues(max_concurrent_requests=1), now=timezone.now()
    )
    other_key = client_api_key_create(name="another client", now=timezone.now())
    client = redis.Redis.from_url(settings.REDIS_URL)

    first: list[requests.Response] = []
    running = threading.Thread(target=lambda: first.append(_post(proxy, client_key, path, body)))
    running.start()
    _wait_until(lambda: upstream.in_flight["tok-long"] == 1, "the long call upstream")
    time.sleep(ARRIVE_AFTER_SECONDS)  # past the slot TTL: only its signs of life count now
    slot_score = client.zrange(redis_keys.account_slots(account.pk), 0, -1, withscores=True)
    read_at_ms = time.time() * 1000
    # The same key again: its one request in flight is still counted.
    same_key = _post(proxy, client_key, path, body)
    # Another key (no policy): the account's one slot is still held, so it waits for it.
    other: list[requests.Response] = []
    waiting = threading.Thread(target=lambda: other.append(_post(proxy, other_key, path, body)))
    waiting.start()
    running.join(60)
    waiting.join(60)
    proxy.drain()

    assert same_key.status_code == 429
    assert same_key.json()["error"]["code"] == "key_concurrency_limited"
    assert (first[0].status_code, other[0].status_code) == (200, 200)
    # Never two calls on the account at once: the other key's ran after the long one.
    assert upstream.max_in_flight["tok-long"] == 1
    assert len(upstream.server.requests_to(_upstream_path(path))) == 2
    # The long call's slot had been refreshed within the last TTL (its start was 3 s old).
    [(_, score)] = slot_score
    assert read_at_ms - score < SLOT_TTL_SECONDS * 1000
    assert client.zcard(redis_keys.key_policy_in_flight(client_key.id)) == 0
    assert client.zcard(redis_keys.account_slots(account.pk)) == 0
    client.close()
