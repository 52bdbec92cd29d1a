"""Failover (spec §3.6): every row of the table against the fake upstream, with the account
state in PostgreSQL afterwards, which account served, the client's answer and the ledger."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.models import Account, AccountCookie, AccountUsage
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from tests.fakes.codex import (
    CLOUDFLARE_CHALLENGE_PAGE,
    Reply,
    number_events,
    sse_frame,
    text_events,
)
from tests.proxy.conftest import make_pool_account, post_responses, reset_rotation
from tests.proxy.factories import make_cookie


@pytest.fixture
def pool(proxy, upstream):
    """Two accounts tried in the order a, b."""
    reset_rotation()
    return make_pool_account("tok-a"), make_pool_account("tok-b")


def _non_stream(proxy, key, **extra):
    return post_responses(proxy, key, {"model": "gpt-5.4", "stream": False, "input": [], **extra})


def _account(account) -> Account:
    return Account.objects.get(pk=account.pk)


def _served_by_b(upstream, response):
    assert response.status_code == 200, response.text
    assert upstream.tokens_called()[-1] == "tok-b"


def test_429_marks_quota_exhausted_with_the_retry_after_cooldown(pool, proxy, upstream, client_key):
    account_a, _ = pool
    upstream.program(
        "tok-a",
        Reply(
            kind="status",
            status=429,
            body={"error": {"message": "slow down"}},
            headers={"Retry-After": "120"},
        ),
    )
    before = timezone.now()

    response = _non_stream(proxy, client_key)

    _served_by_b(upstream, response)
    stored = _account(account_a)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)
    assert (
        before + timedelta(seconds=119)
        <= stored.quota_cooldown_until
        <= timezone.now() + timedelta(seconds=121)
    )
    proxy.drain()
    assert OpsErrorLog.objects.count() == 0  # rotations show up as account state, not rows
    assert UsageRecord.objects.get().attempt_index == 1


def test_429_without_retry_after_cools_down_for_60_seconds(pool, proxy, upstream, client_key):
    account_a, _ = pool
    upstream.program("tok-a", Reply(kind="status", status=429, body="rate limited"))
    before = timezone.now()

    _served_by_b(upstream, _non_stream(proxy, client_key))

    cooldown = _account(account_a).quota_cooldown_until
    assert before + timedelta(seconds=59) <= cooldown <= timezone.now() + timedelta(seconds=61)


def test_402_marks_quota_exhausted_without_cooldown(pool, proxy, upstream, client_key):
    account_a, _ = pool
    upstream.program("tok-a", Reply(kind="status", status=402, body={"detail": "payment required"}))

    _served_by_b(upstream, _non_stream(proxy, client_key))

    stored = _account(account_a)
    assert (stored.status, stored.quota_cooldown_until) == ("quota_exhausted", None)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"error": {"code": "token_expired"}}, "expired"),
        ({"error": {"code": "account_deactivated"}}, "banned"),
    ],
)
def test_401_marks_expired_or_banned(pool, proxy, upstream, client_key, body, status):
    account_a, _ = pool
    upstream.program("tok-a", Reply(kind="status", status=401, body=body))

    _served_by_b(upstream, _non_stream(proxy, client_key))

    assert _account(account_a).status == status


def test_403_json_marks_banned(pool, proxy, upstream, client_key):
    account_a, _ = pool
    upstream.program("tok-a", Reply(kind="status", status=403, body={"detail": "forbidden"}))

    _served_by_b(upstream, _non_stream(proxy, client_key))

    assert _account(account_a).status == "banned"


def test_403_html_without_cloudflare_markers_is_returned_not_a_ban(
    pool, proxy, upstream, client_key
):
    account_a, _ = pool
    upstream.program(
        "tok-a", Reply(kind="status", status=403, body="<html><body>Forbidden</body></html>")
    )

    response = _non_stream(proxy, client_key, use_websocket=False)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert upstream.tokens_called() == ["tok-a"]
    assert _account(account_a).status == "active"


def test_cloudflare_challenge_cools_the_account_down_progressively(
    pool, proxy, upstream, client_key
):
    account_a, account_b = pool
    make_cookie(account=account_a, expires_at=timezone.now() + timedelta(days=30))
    upstream.program("tok-a", Reply(kind="status", status=403, body=CLOUDFLARE_CHALLENGE_PAGE))
    before = timezone.now()

    _served_by_b(upstream, _non_stream(proxy, client_key))

    first = _account(account_a).cloudflare_cooldown_until
    assert before + timedelta(seconds=9) <= first <= timezone.now() + timedelta(seconds=11)
    assert AccountCookie.objects.get(account=account_a).expires_at <= first

    # In cooldown the account is skipped; once it is over the next challenge costs 30 s.
    Account.objects.filter(pk=account_a.pk).update(
        cloudflare_cooldown_until=timezone.now() - timedelta(seconds=1)
    )
    Account.objects.filter(pk=account_b.pk).update(status="disabled")
    upstream.program("tok-a", Reply(kind="status", status=403, body=CLOUDFLARE_CHALLENGE_PAGE))
    second_start = timezone.now()

    response = _non_stream(proxy, client_key)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert "1 cloudflare-challenge" in response.json()["error"]["message"]
    second = _account(account_a).cloudflare_cooldown_until
    assert second_start + timedelta(seconds=29) <= second <= timezone.now() + timedelta(seconds=31)


def test_empty_404_wipes_cookies_and_the_third_in_an_hour_disables(
    pool, proxy, upstream, client_key
):
    account_a, _ = pool
    make_cookie(account=account_a)
    for turn in range(3):
        reset_rotation()
        upstream.program("tok-a", Reply(kind="status", status=404, body=""))
        # A conversation each: affinity would keep one on tok-b (the account that served it).
        _served_by_b(
            upstream,
            _non_stream(proxy, client_key, prompt_cache_key=f"conv-{turn}", use_websocket=False),
        )
        assert AccountCookie.objects.filter(account=account_a).count() == 0

    assert _account(account_a).status == "disabled"


def test_model_unsupported_moves_on_without_touching_the_account(pool, proxy, upstream, client_key):
    account_a, account_b = pool
    unsupported = {
        "detail": "The 'gpt-5.4' model is not supported when using Codex with a ChatGPT account."
    }
    upstream.program("tok-a", Reply(kind="status", status=400, body=unsupported))
    upstream.program("tok-b", Reply(kind="status", status=400, body=unsupported))

    response = _non_stream(proxy, client_key)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "model_not_found")
    assert error["message"].startswith("All accounts exhausted (2 model-unsupported).")
    assert {_account(account_a).status, _account(account_b).status} == {"active"}


def test_other_4xx_json_is_returned_verbatim_without_rotation(pool, proxy, upstream, client_key):
    body = {
        "error": {
            "message": "Input must be a list",
            "type": "invalid_request_error",
            "param": "input",
        }
    }
    upstream.program("tok-a", Reply(kind="status", status=400, body=body))

    response = _non_stream(proxy, client_key, input="a string", use_websocket=False)

    assert response.status_code == 400
    assert response.json() == body
    assert upstream.tokens_called() == ["tok-a"]


def test_a_4xx_error_frame_is_returned_verbatim_without_rotation(pool, proxy, upstream, client_key):
    """Over the WebSocket the upstream body is the raw error frame (spec §1.7)."""
    error = {"message": "Input must be a list", "type": "invalid_request_error", "param": "input"}
    upstream.program("tok-a", Reply(kind="status", status=400, body={"error": error}))

    response = _non_stream(proxy, client_key, input="a string")

    assert response.status_code == 400
    assert response.json() == {"type": "error", "status": 400, "error": error, "headers": {}}
    assert upstream.tokens_called() == ["tok-a"]
    assert [sent.method for sent in upstream.responses_requests()] == ["WS"]


def test_5xx_is_retried_twice_on_the_same_account(pool, proxy, upstream, client_key):
    upstream.program(
        "tok-a",
        Reply(kind="status", status=502, body="bad gateway"),
        Reply(kind="status", status=503, body="busy"),
    )

    response = _non_stream(proxy, client_key)

    assert response.status_code == 200
    assert upstream.tokens_called() == ["tok-a", "tok-a", "tok-a"]


def test_exhausted_5xx_and_transport_errors_move_on_and_are_logged(
    pool, proxy, upstream, client_key
):
    account_a, _ = pool
    upstream.program("tok-a", *[Reply(kind="status", status=500, body="boom")] * 3)

    response = _non_stream(proxy, client_key)

    _served_by_b(upstream, response)
    assert upstream.tokens_called() == ["tok-a"] * 3 + ["tok-b"]
    assert _account(account_a).status == "active"
    proxy.drain()
    [error] = OpsErrorLog.objects.all()
    assert (error.message, error.failure_class, error.account_id) == (
        "v1 responses upstream request failed",
        "upstream_unavailable",
        account_a.id,
    )
    assert (error.status_code, error.upstream_status_code, error.attempt_index) == (500, 500, 0)
    assert UsageRecord.objects.get().attempt_index == 1


def test_a_dropped_connection_moves_on(pool, proxy, upstream, client_key):
    # The WebSocket drop falls back to HTTP SSE on the same account (spec §1.8); that drops too.
    upstream.program("tok-a", Reply(kind="drop"), Reply(kind="drop"))

    _served_by_b(upstream, _non_stream(proxy, client_key))
    assert [
        (sent.method, token)
        for sent, token in zip(upstream.responses_requests(), upstream.tokens_called(), strict=True)
    ] == [("WS", "tok-a"), ("POST", "tok-a"), ("WS", "tok-b")]


@pytest.mark.parametrize(
    ("code", "message", "status"),
    [
        ("model_not_supported", "The model is not supported", "active"),
        ("insufficient_quota", "You exceeded your current quota", "quota_exhausted"),
        ("token_expired", "Your token expired", "expired"),
        ("token_revoked", "account banned for abuse", "banned"),
    ],
)
def test_sse_failure_codes_move_on_with_their_account_effect(
    pool, proxy, upstream, client_key, code, message, status
):
    account_a, _ = pool
    upstream.program("tok-a", Reply(kind="failed", code=code, message=message))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200
    assert upstream.tokens_called() == ["tok-a", "tok-b"]
    assert response.content.count(b"response.completed") >= 1
    assert b"response.failed" not in response.content  # the failure never reached the client
    assert _account(account_a).status == status


def test_a_non_rotating_sse_failure_is_the_originals_failure_answer(
    pool, proxy, upstream, client_key
):
    # context_length_exceeded matches no code of the spec §1.7 mapping: 502, which a stream
    # client gets as a 200 SSE failure event of the original's kind (not the upstream's event).
    upstream.program(
        "tok-a", Reply(kind="failed", code="context_length_exceeded", message="too long")
    )

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200
    assert b"event: response.failed" in response.content
    assert b'"code": "codex_api_error"' in response.content
    assert b"too long" not in response.content
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert upstream.tokens_called() == ["tok-a"]
    proxy.drain()
    error = OpsErrorLog.objects.get()
    assert (
        error.message,
        error.failure_class,
        error.status_code,
        error.client_status_code,
    ) == ("v1 responses stream failed", "response_failed", 502, 200)
    assert error.metadata_json["failureMessage"] == "too long"


def test_an_empty_non_stream_completion_moves_on_and_is_counted(pool, proxy, upstream, client_key):
    account_a, _ = pool
    empty = text_events(
        text="",
        deltas=1,
        model="gpt-5.4",
        usage={
            "input_tokens": 3,
            "output_tokens": 0,
            "total_tokens": 3,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    )
    empty[-1]["response"]["output"] = []
    upstream.program("tok-a", Reply(events=[e for e in empty if "delta" not in e["type"]]))

    _served_by_b(upstream, _non_stream(proxy, client_key))

    proxy.drain()
    usage = AccountUsage.objects.get(account=account_a)
    assert (usage.empty_response_count, usage.request_count) == (1, 1)


def test_all_accounts_rate_limited_gives_429_naming_the_count(pool, proxy, upstream, client_key):
    for token in ("tok-a", "tok-b"):
        upstream.program(token, Reply(kind="status", status=429, body="Too many requests"))

    response = _non_stream(proxy, client_key, use_websocket=False)

    assert response.status_code == 429
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert (
        error["message"]
        == "All accounts exhausted (2 rate-limited). Codex upstream error: Too many requests"
    )
    proxy.drain()
    final = OpsErrorLog.objects.get()
    assert (final.message, final.failure_class, final.status_code) == (
        "v1 responses dispatch failed",
        "rate_limited",
        429,
    )
    assert final.metadata_json["exhaustedCount"] == 2
    assert RequestTimeBucket.objects.get().error_count == 1


def test_no_account_at_all_is_503_or_a_stream_failure(proxy, upstream, client_key):
    response = _non_stream(proxy, client_key)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_available_accounts"

    streamed = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})
    assert streamed.status_code == 200
    assert b'"code": "no_available_accounts"' in streamed.content
    assert streamed.content.endswith(b"data: [DONE]\n\n")
    proxy.drain()
    assert OpsErrorLog.objects.filter(failure_class="no_available_accounts").count() == 2


def test_an_account_with_an_expired_token_is_marked_expired_and_skipped(
    proxy, upstream, client_key
):
    reset_rotation()
    stale = make_pool_account(
        "tok-stale", access_token_expires_at=timezone.now() - timedelta(minutes=1)
    )
    make_pool_account("tok-b")

    _served_by_b(upstream, _non_stream(proxy, client_key))

    assert upstream.tokens_called() == ["tok-b"]
    assert _account(stale).status == "expired"


def test_no_rotation_once_bytes_reached_the_client(pool, proxy, upstream, client_key):
    upstream.program("tok-a", Reply(kind="cut", cut_after=6, deltas=5))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200
    assert upstream.tokens_called() == ["tok-a"]
    assert b'"code": "stream_disconnected"' in response.content
    assert response.content.endswith(b"data: [DONE]\n\n")
    proxy.drain()
    error = OpsErrorLog.objects.get()
    assert (error.message, error.failure_class, error.status_code) == (
        "v1 responses stream failed",
        "missing_completed",
        502,
    )
    assert (
        error.metadata_json["synthetic"] is True and error.metadata_json["failureSource"] == "proxy"
    )


def test_a_stream_cut_before_any_output_moves_on(pool, proxy, upstream, client_key):
    # Cut over the WebSocket, then over the HTTP SSE fallback on the same account (spec §1.8).
    upstream.program("tok-a", Reply(kind="cut", cut_after=2), Reply(kind="cut", cut_after=2))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert upstream.tokens_called() == ["tok-a", "tok-a", "tok-b"]
    assert [sent.method for sent in upstream.responses_requests()] == ["WS", "POST", "WS"]
    assert b"stream_disconnected" not in response.content
    assert b"response.completed" in response.content


def test_previous_response_id_goes_to_one_account_and_is_never_fanned_out(
    pool, proxy, upstream, client_key
):
    upstream.program("tok-a", Reply(kind="status", status=429, body="limited"))

    response = _non_stream(proxy, client_key, previous_response_id="resp_external_123")

    assert response.status_code == 429
    assert upstream.tokens_called() == ["tok-a"]
    assert upstream.responses_requests()[0].json()["previous_response_id"] == "resp_external_123"


def test_streaming_is_byte_for_byte(pool, proxy, upstream, client_key):
    events = number_events(
        text_events(text="Exactly these bytes.", deltas=3, model="gpt-5.4")[:-1]
        + text_events(text="Exactly these bytes.", deltas=3, model="gpt-5.4")[-1:]
    )
    upstream.program("tok-a", Reply(events=events))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.content == b"".join(sse_frame(event) for event in events) + b"data: [DONE]\n\n"
