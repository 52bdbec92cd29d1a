"""The Siteverify client (spec §8.4) against the fake Turnstile over real HTTP: the request, one
retry after 300 ms with the same idempotency key for transient failures, typed unavailability."""

from __future__ import annotations

import time
import uuid

import pytest

from bots.clients.turnstile import (
    RETRY_DELAY_SECONDS,
    SiteverifyAnswer,
    SiteverifyClient,
    SiteverifyUnavailableError,
)


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(turnstile, sleeps):
    return SiteverifyClient(
        verify_url=turnstile.siteverify_url, secret=turnstile.secret_key, sleep=sleeps.append
    )


def test_a_valid_token_gets_its_context_back(client, turnstile, sleeps):
    token = turnstile.issue_token(cdata="c" * 64, hostname="support.example.com")

    answer = client.verify(token=token)

    assert answer == SiteverifyAnswer(
        success=True,
        error_codes=(),
        hostname="support.example.com",
        action="hodor_verify",
        cdata="c" * 64,
    )
    [sent] = turnstile.siteverify_requests()
    assert sent.header("Content-Type") == "application/json"
    body = sent.json()
    assert (body["secret"], body["response"]) == (turnstile.secret_key, token)
    assert uuid.UUID(body["idempotency_key"]).version == 4
    assert sleeps == []


def test_a_rejected_token_is_an_answer_with_its_codes(client, turnstile):
    answer = client.verify(token="never-issued")

    assert (answer.success, answer.error_codes) == (False, ("invalid-input-response",))


@pytest.mark.parametrize(
    ("mode", "status"),
    [("status", 500), ("status", 503), ("disconnect", 500), ("not_json", 200),
     ("internal_error", 200)],
)  # fmt: skip
def test_a_transient_failure_is_retried_once_after_300_ms_with_the_same_key(
    mode, status, client, turnstile, sleeps
):
    turnstile.fail_siteverify(mode, status=status)
    token = turnstile.issue_token(cdata="c" * 64)

    answer = client.verify(token=token, idempotency_key="key-1")

    assert answer.success is True
    assert [request.json()["idempotency_key"] for request in turnstile.siteverify_requests()] == [
        "key-1",
        "key-1",
    ]
    assert sleeps == [RETRY_DELAY_SECONDS] == [0.3]


def test_a_retry_after_a_lost_answer_gets_the_first_verdict_again(client, turnstile):
    """Cloudflare spent the token on the first call but the answer never arrived: the retry,
    with the same key, is answered like the first call instead of "duplicate"."""
    token = turnstile.issue_token(cdata="c" * 64)
    first = client.verify(token=token, idempotency_key="key-2")

    again = client.verify(token=token, idempotency_key="key-2")
    other_key = client.verify(token=token, idempotency_key="key-3")

    assert again == first
    assert other_key.error_codes == ("timeout-or-duplicate",)


def test_still_transient_after_the_retry_is_unavailable_not_permanent(client, turnstile, sleeps):
    turnstile.fail_siteverify("status", status=502, times=2)

    with pytest.raises(SiteverifyUnavailableError) as raised:
        client.verify(token="t")

    assert raised.value.permanent is False
    assert str(raised.value) == "HTTP 502"
    assert len(turnstile.siteverify_requests()) == 2


def test_a_timeout_is_transient(turnstile, sleeps):
    impatient = SiteverifyClient(
        verify_url=turnstile.siteverify_url,
        secret=turnstile.secret_key,
        sleep=sleeps.append,
        timeout=0.2,
    )
    turnstile.fail_siteverify("slow", delay=1.0, times=2)

    with pytest.raises(SiteverifyUnavailableError) as raised:
        impatient.verify(token="t")

    assert str(raised.value) == "network error: ReadTimeout"
    assert len(sleeps) == 1


@pytest.mark.parametrize(("mode", "status"), [("status", 400), ("status", 404), ("malformed", 200)])
def test_other_answers_are_unavailable_at_once(mode, status, client, turnstile, sleeps):
    turnstile.fail_siteverify(mode, status=status, times=2)

    with pytest.raises(SiteverifyUnavailableError) as raised:
        client.verify(token="t")

    assert raised.value.permanent is True
    assert len(turnstile.siteverify_requests()) == 1
    assert sleeps == []


def test_neither_secret_nor_token_nor_url_appear_in_errors(turnstile):
    refused = SiteverifyClient(verify_url="http://127.0.0.1:9/siteverify", secret="s3cr3t-value")

    with pytest.raises(SiteverifyUnavailableError) as raised:
        refused.verify(token="tok-value")

    text = f"{raised.value} {raised.value!r} {refused!r}"
    assert "s3cr3t-value" not in text and "tok-value" not in text
    assert str(raised.value) == "network error: ConnectionError"
    chain, error = [], raised.value
    while error is not None:  # the requests exception (its text names the URL) is not kept
        chain.append(type(error).__name__)
        error = error.__cause__ or error.__context__
    assert chain == ["SiteverifyUnavailableError", "_Transient"]


@pytest.mark.parametrize(
    ("mode", "text", "permanent", "attempts"),
    [
        ("huge", "HTTP 200: answer longer than 64 KiB", True, 1),
        # Nested past what the parser follows: not JSON to us, like a proxy's error page.
        ("deep", "HTTP 200: body is not JSON", False, 2),
    ],
)
def test_an_oversized_or_unparseable_answer_is_unavailable_not_a_crash(
    mode, text, permanent, attempts, client, turnstile
):
    turnstile.fail_siteverify(mode, times=2)

    with pytest.raises(SiteverifyUnavailableError) as raised:
        client.verify(token="t")

    assert (str(raised.value), raised.value.permanent) == (text, permanent)
    assert len(turnstile.siteverify_requests()) == attempts


def test_an_answer_trickling_in_is_cut_off_at_the_timeout(turnstile, sleeps):
    impatient = SiteverifyClient(
        verify_url=turnstile.siteverify_url,
        secret=turnstile.secret_key,
        sleep=sleeps.append,
        timeout=1.0,
    )
    # One byte every 0.2 s: no single read times out, the whole answer would take 7 s.
    turnstile.fail_siteverify("trickle", delay=0.2, times=2)
    started = time.monotonic()

    with pytest.raises(SiteverifyUnavailableError) as raised:
        impatient.verify(token="t")

    assert str(raised.value) == "network error: answer not complete within 1s"
    assert raised.value.permanent is False
    assert time.monotonic() - started < 4  # two attempts of 1 s, not two of 7
    assert len(sleeps) == 1
