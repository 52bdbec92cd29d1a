"""``Idempotency-Key`` on non-stream ``/v1/responses`` and chat (issue 25 item 4): a retried call
with the same key and body gets the stored answer and spends no second upstream call; another
body with that key is 409; a call still running is 409 with Retry-After; a failed call can be
retried; streams ignore the header; a flushed Redis only loses the dedupe."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import pytest
import requests
from django.conf import settings
from django.utils import timezone

from proxy import redis_keys
from proxy.dispatch.client_errors import ClientError
from proxy.services.client_api_keys import client_api_key_create
from telemetry.models import UsageRecord
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"model": "gpt-5.4", "input": [{"role": "user", "content": "hi"}], "stream": False}


def _error(response) -> dict:
    return response.json()["error"]


def _call(proxy, client_key, body=BODY, *, key="retry-me-1", **headers):
    return post_responses(proxy, client_key, body, **{"Idempotency-Key": key, **headers})


def test_a_retry_with_the_same_key_and_body_gets_the_stored_answer_without_a_second_call(
    proxy, upstream, client_key, redis_client
):
    make_pool_account("tok-a")

    first = _call(proxy, client_key)
    retried = _call(proxy, client_key)

    assert first.status_code == retried.status_code == 200
    assert retried.json() == first.json()
    assert retried.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert retried.headers["x-request-id"] != first.headers["x-request-id"]
    assert len(upstream.responses_requests()) == 1
    proxy.drain()
    assert UsageRecord.objects.count() == 1  # the replay spent nothing
    # The header's value never becomes a Redis key name: its SHA-256 does.
    name = redis_keys.idempotency(client_key.id, hashlib.sha256(b"retry-me-1").hexdigest())
    assert redis_client.exists(name)
    assert not list(redis_client.scan_iter(match="*retry-me-1*"))


def test_the_same_key_with_another_body_is_409(proxy, upstream, client_key):
    make_pool_account("tok-a")
    assert _call(proxy, client_key).status_code == 200

    other = _call(proxy, client_key, {**BODY, "input": [{"role": "user", "content": "bye"}]})

    assert other.status_code == 409
    assert _error(other)["code"] == "idempotency_key_reused"
    assert len(upstream.responses_requests()) == 1


def test_keys_are_per_client_key(proxy, upstream, client_key):
    make_pool_account("tok-a")
    other_client_key = client_api_key_create(name="other", now=timezone.now())

    assert _call(proxy, client_key).status_code == 200
    other = _call(proxy, other_client_key)

    assert other.status_code == 200 and "idempotent-replayed" not in other.headers
    assert len(upstream.responses_requests()) == 2


def test_a_retry_while_the_first_call_runs_is_409_with_retry_after(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=6, delta_delay=0.3))
    first: list[requests.Response] = []
    running = threading.Thread(target=lambda: first.append(_call(proxy, client_key)))
    running.start()
    deadline = time.monotonic() + 20
    while not upstream.in_flight["tok-a"] and time.monotonic() < deadline:
        time.sleep(0.02)

    meanwhile = _call(proxy, client_key)
    running.join(30)

    assert meanwhile.status_code == 409
    assert _error(meanwhile)["code"] == "idempotency_request_in_progress"
    assert meanwhile.headers["Retry-After"] == "1"
    assert first[0].status_code == 200
    assert len(upstream.responses_requests()) == 1


def test_a_failed_call_can_be_retried_with_its_key(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(kind="status", status=400, body={"error": {"code": "bad"}}))

    failed = _call(proxy, client_key)
    retried = _call(proxy, client_key)

    assert failed.status_code == 400
    assert retried.status_code == 200 and "idempotent-replayed" not in retried.headers
    assert len(upstream.responses_requests()) == 2


def test_chat_completions_are_deduplicated_too(proxy, upstream, client_key):
    make_pool_account("tok-a")
    body = {"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]}

    def call():
        return requests.post(
            f"{proxy.url}/v1/chat/completions",
            data=json.dumps(body),
            headers={
                "Authorization": f"Bearer {client_key.key}",
                "Content-Type": "application/json",
                "Idempotency-Key": "chat-1",
            },
            timeout=60,
        )

    first, retried = call(), call()

    assert first.status_code == retried.status_code == 200
    assert retried.json() == first.json()
    assert retried.json()["object"] == "chat.completion"
    assert len(upstream.responses_requests()) == 1


def test_streams_ignore_the_header(proxy, upstream, client_key):
    make_pool_account("tok-a")
    body = {**BODY, "stream": True}

    assert _call(proxy, client_key, body).status_code == 200
    assert _call(proxy, client_key, body).status_code == 200

    assert len(upstream.responses_requests()) == 2


@pytest.mark.parametrize("key", ["", "x" * 256, "two words", "naïve"])
def test_a_malformed_key_is_400(proxy, upstream, client_key, key):
    make_pool_account("tok-a")

    response = post_responses(proxy, client_key, BODY, **{"Idempotency-Key": key.encode()})

    assert response.status_code == 400
    assert (
        _error(response)
        == ClientError(
            400,
            "invalid_request_error",
            "invalid_idempotency_key",
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        ).body()["error"]
    )
    assert upstream.responses_requests() == []


def test_a_flushed_redis_only_loses_the_dedupe(proxy, upstream, client_key, redis_client):
    make_pool_account("tok-a")
    assert _call(proxy, client_key).status_code == 200

    redis_client.flushdb()
    again = _call(proxy, client_key)

    assert again.status_code == 200 and "idempotent-replayed" not in again.headers
    assert len(upstream.responses_requests()) == 2


def test_an_answer_too_large_to_store_is_not_replayed(proxy, upstream, client_key, settings):
    make_pool_account("tok-a")
    settings.IDEMPOTENCY_MAX_STORED_BYTES = 10

    assert _call(proxy, client_key).status_code == 200
    again = _call(proxy, client_key)

    assert again.status_code == 200 and "idempotent-replayed" not in again.headers
    assert len(upstream.responses_requests()) == 2


def test_the_stored_answer_lives_for_the_ttl(proxy, upstream, client_key, redis_client):
    make_pool_account("tok-a")
    assert _call(proxy, client_key).status_code == 200

    name = redis_keys.idempotency(client_key.id, hashlib.sha256(b"retry-me-1").hexdigest())
    assert 0 < redis_client.ttl(name) <= settings.IDEMPOTENCY_TTL_SECONDS
