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
import redis
import requests
from django.conf import settings
from django.utils import timezone

from proxy import redis_keys
from proxy.domain.client_errors import ClientError
from proxy.services.client_api_keys import client_api_key_create
from telemetry.models import UsageRecord
from tests.conftest import flush_this_runs_keys
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account, post_responses

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


def test_a_flushed_redis_only_loses_the_dedupe(proxy, upstream, client_key):
    make_pool_account("tok-a")
    assert _call(proxy, client_key).status_code == 200

    flush_this_runs_keys()
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


# ----------------------------------------------------------------------------- issue 34 item 9
# docs/proxy.md's promise kept: a client that leaves does not cancel the call; claims are never
# overwritten; a claim outlives a long call. (The original has no Idempotency-Key at all:
# peers.md B.4 — nothing of its is mirrored.)


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _retry_until_answered(call) -> tuple[requests.Response, list[int]]:
    """Call ``call()`` until it is not 409 in progress (as a client honouring Retry-After
    would); returns the answer and the statuses seen before it."""
    seen = []
    deadline = time.monotonic() + 30
    while True:
        response = call()
        if response.status_code != 409:
            return response, seen
        assert _error(response)["code"] == "idempotency_request_in_progress"
        seen.append(response.status_code)
        assert time.monotonic() < deadline, "the first call never finished"
        time.sleep(0.2)


CHAT_BODY = {"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]}


def _chat(proxy, client_key, *, key: str, timeout: float = 60) -> requests.Response:
    return requests.post(
        f"{proxy.url}/v1/chat/completions",
        data=json.dumps(CHAT_BODY),
        headers={
            "Authorization": f"Bearer {client_key.key}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        timeout=timeout,
    )


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/chat/completions"])
def test_a_client_that_times_out_does_not_cancel_the_call_and_its_retry_gets_the_answer(
    proxy, upstream, client_key, route
):
    """The client's own timeout fires (0.5 s) while the upstream takes 2 s: the call goes on,
    its answer is stored, and the retry gets it — one upstream call, one ledger row."""
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(first_byte_delay=2.0, text="worth the wait"))

    def call(timeout: float = 60) -> requests.Response:
        if route == "/v1/chat/completions":
            return _chat(proxy, client_key, key="leaving-1", timeout=timeout)
        return _call(proxy, client_key, key="leaving-1", timeout=timeout)

    with pytest.raises(requests.Timeout):
        call(timeout=0.5)
    answer, waited = _retry_until_answered(call)
    proxy.drain()

    assert answer.status_code == 200
    assert answer.headers["idempotent-replayed"] == "true"
    if route == "/v1/chat/completions":
        assert answer.json()["choices"][0]["message"]["content"] == "worth the wait"
    else:
        assert answer.json()["output"][0]["content"][0]["text"] == "worth the wait"
        assert answer.json()["status"] == "completed"
    assert set(waited) <= {409}  # asked again while the first call still ran
    assert len(upstream.responses_requests()) == 1  # no second upstream call
    assert upstream.disconnects == []  # the upstream never saw its caller go
    [record] = UsageRecord.objects.all()
    assert record.route == route


@pytest.mark.slow
def test_a_pending_claim_outlives_a_call_longer_than_its_ttl(proxy, upstream, client_key, settings):
    """The claim's TTL is 1 s and the call takes 3: it is extended while the call runs, so a
    retry at 2 s is told to wait instead of starting a second upstream call."""
    settings.IDEMPOTENCY_PENDING_SECONDS = 1
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(first_byte_delay=3.0))
    first: list[requests.Response] = []
    running = threading.Thread(target=lambda: first.append(_call(proxy, client_key)))
    running.start()
    _wait_until(lambda: upstream.in_flight["tok-a"] == 1, "the first call upstream")
    time.sleep(2.0)  # twice the claim's TTL

    meanwhile = _call(proxy, client_key)
    running.join(30)
    after = _call(proxy, client_key)

    assert meanwhile.status_code == 409
    assert _error(meanwhile)["code"] == "idempotency_request_in_progress"
    assert first[0].status_code == 200
    assert after.status_code == 200 and after.headers["idempotent-replayed"] == "true"
    assert after.json() == first[0].json()
    assert len(upstream.responses_requests()) == 1


def _claim_name(client_key, key: str = "retry-me-1") -> str:
    return redis_keys.idempotency(client_key.id, hashlib.sha256(key.encode()).hexdigest())


def _take_over_while_running(proxy, upstream, client_key, redis_client, first_reply: Reply):
    """Request A runs; its claim lapses (deleted, as its TTL would once its worker stalled);
    request B with the same key claims it and runs, longer than A. Returns A's thread and
    answers, B's thread and answers, and B's claim as it stood when B began."""
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    upstream.program("tok-a", first_reply)
    upstream.program("tok-b", Reply(first_byte_delay=2.0))
    upstream.default_reply = Reply(first_byte_delay=2.0)
    a_answers: list[requests.Response] = []
    a = threading.Thread(target=lambda: a_answers.append(_call(proxy, client_key)))
    a.start()
    _wait_until(lambda: sum(upstream.in_flight.values()) == 1, "A upstream")
    redis_client.delete(_claim_name(client_key))
    b_answers: list[requests.Response] = []
    b = threading.Thread(target=lambda: b_answers.append(_call(proxy, client_key)))
    b.start()
    _wait_until(lambda: sum(upstream.in_flight.values()) == 2, "B upstream")
    b_claim = redis_client.get(_claim_name(client_key))
    return a, a_answers, b, b_answers, b_claim


def test_a_finished_call_never_overwrites_another_requests_claim(
    proxy, upstream, client_key, redis_client
):
    a, a_answers, b, b_answers, b_claim = _take_over_while_running(
        proxy, upstream, client_key, redis_client, Reply(first_byte_delay=1.0)
    )
    a.join(30)  # A answers while B still runs

    claim_after_a = redis_client.get(_claim_name(client_key))
    meanwhile = _call(proxy, client_key)
    b.join(30)
    after = _call(proxy, client_key)

    assert json.loads(b_claim)["state"] == "pending"
    assert a_answers[0].status_code == 200
    assert claim_after_a == b_claim  # A's answer did not replace B's claim
    assert meanwhile.status_code == 409  # B still runs: nobody is served A's answer for it
    assert b_answers[0].status_code == 200
    assert after.headers["idempotent-replayed"] == "true"
    assert after.json() == b_answers[0].json()  # B's answer, stored under B's claim
    assert len(upstream.responses_requests()) == 2


def test_a_failed_call_never_deletes_another_requests_claim(
    proxy, upstream, client_key, redis_client
):
    a, a_answers, b, b_answers, b_claim = _take_over_while_running(
        proxy,
        upstream,
        client_key,
        redis_client,
        Reply(kind="status", status=400, body={"error": {"code": "bad"}}, first_byte_delay=1.0),
    )
    a.join(30)  # A fails while B still runs: it gives back only its own claim

    meanwhile = _call(proxy, client_key)
    b.join(30)

    assert a_answers[0].status_code == 400
    assert meanwhile.status_code == 409  # B's claim survived: no third upstream call
    assert b_answers[0].status_code == 200
    assert len(upstream.responses_requests()) == 2
    assert json.loads(redis_client.get(_claim_name(client_key)))["state"] == "done"


@pytest.mark.subprocess
def test_a_graceful_stop_ends_a_call_whose_client_left_and_gives_its_claim_back(
    upstream, transactional_db, client_key, redis_client
):
    """The one thing that ends a call its client left: the web process stopping. The claim is
    given back (the client's retry runs anew on another process) and the account slot freed."""
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(first_byte_delay=60))
    process = UvicornProcess(upstream.url)
    try:
        with pytest.raises(requests.Timeout):
            _call(process, client_key, timeout=0.5)
        _wait_until(lambda: upstream.in_flight["tok-a"] == 1, "the call upstream")
        claimed = redis_client.get(_claim_name(client_key))
    finally:
        process.stop()

    assert json.loads(claimed)["state"] == "pending"
    assert redis_client.get(_claim_name(client_key)) is None
    assert redis_client.zcard(redis_keys.account_slots(account.pk)) == 0


def test_a_flushall_during_a_call_still_stores_its_answer(
    private_proxy, private_redis, upstream, client_key
):
    """Redis loses the claim mid-call (FLUSHALL): the call, still running and with nobody else
    holding the key, stores its answer all the same — the client's retry gets it."""
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(first_byte_delay=1.5))
    client = redis.Redis.from_url(private_redis.url)
    with pytest.raises(requests.Timeout):
        _call(private_proxy, client_key, timeout=0.5)
    _wait_until(lambda: upstream.in_flight["tok-a"] == 1, "the call upstream")
    client.flushall()
    _wait_until(lambda: client.get(_claim_name(client_key)) is not None, "the answer stored")

    retried = _call(private_proxy, client_key)

    assert json.loads(client.get(_claim_name(client_key)))["state"] == "done"
    assert retried.status_code == 200 and retried.headers["idempotent-replayed"] == "true"
    assert len(upstream.responses_requests()) == 1
