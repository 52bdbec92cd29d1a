"""What the upstream sees (spec §2.2–§2.6, §3.5, §4.3): headers in wire order, per-account
pseudonyms, cookies, quota verification, passive quota sync and waiting for a slot."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from proxy.models import Account, AccountCookie, AccountUsage, RuntimeSettings
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses
from tests.proxy.factories import make_cookie

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


# The base headers, in the fingerprint's header order (spec §2.2): what every call but usage
# starts with.
BASE_HEADERS = [
    "authorization",
    "chatgpt-account-id",
    "originator",
    "user-agent",
    "sec-ch-ua",
    "sec-ch-ua-mobile",
    "sec-ch-ua-platform",
    "accept-encoding",
    "accept-language",
    "sec-fetch-site",
    "sec-fetch-mode",
    "sec-fetch-dest",
]
EVERY_CONTEXT_VALUE = {
    "turnState": "ts-1",
    "turnMetadata": '{"thread_source":"user"}',
    "betaFeatures": "beta-a",
    "includeTimingMetrics": True,
    "version": "26.519.81530",
    "codexWindowId": "window-1",
    "parentThreadId": "parent-1",
    "session_id": "session-1",
    "thread_id": "thread-1",
    "turn_id": "turn-1",
}


def _names(sent) -> list[str]:
    return [name.lower() for name, _ in sent.headers if name.lower() not in ("content-length",)]


def test_responses_headers_are_sent_in_the_originals_order(proxy, upstream, client_key):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # codex_backend_client_should_send_http_sse_headers_in_fingerprint_order (here every header
    # it can send, in full) and codex_backend_client_should_send_desktop_headers_and_capture_
    # response_metadata.
    account = make_pool_account("tok-a", chatgpt_account_id="org-123")
    make_cookie(account=account, domain="127.0.0.1", path="/", value="old")

    post_responses(
        proxy,
        client_key,
        {
            "model": "gpt-5.4",
            "stream": False,
            "use_websocket": False,
            "client_metadata": {"x-openai-subagent": "review"},
            **EVERY_CONTEXT_VALUE,
        },
    )

    [sent] = upstream.responses_requests()
    assert _names(sent) == [
        "host",
        *BASE_HEADERS,
        "content-type",
        "cookie",
        "accept",
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "session-id",
        "thread-id",
        "x-codex-turn-id",
        "x-codex-window-id",
        "x-codex-turn-state",
        "x-codex-turn-metadata",
        "x-codex-beta-features",
        "x-responsesapi-include-timing-metrics",
        "version",
        "x-codex-parent-thread-id",
        "x-openai-subagent",
    ]
    assert sent.header("user-agent") == "Codex Desktop/26.519.81530 (darwin; arm64)"
    assert sent.header("sec-ch-ua") == '"Chromium";v="146", "Not:A-Brand";v="24"'
    assert sent.header("originator") == "Codex Desktop"
    assert sent.header("chatgpt-account-id") == "org-123"
    assert sent.header("openai-beta") == "responses_websockets=2026-02-06"
    assert sent.header("x-openai-internal-codex-residency") == "us"
    assert sent.header("content-type") == "application/json"
    assert sent.header("accept") == "text/event-stream"
    assert sent.header("cookie") == "cf_clearance=old"
    assert sent.header("x-codex-turn-state") == "ts-1"
    assert sent.header("x-codex-turn-metadata") == '{"thread_source":"user"}'
    assert sent.header("x-responsesapi-include-timing-metrics") == "true"
    assert sent.header("x-openai-subagent") == "review"
    assert UUID.match(sent.header("x-codex-installation-id"))
    assert sent.header("x-client-request-id").startswith("cr_")
    for header in ("session-id", "thread-id", "x-codex-turn-id", "x-codex-window-id"):
        assert sent.header(header).startswith("wi_")


def test_compact_headers_are_sent_in_the_originals_order(proxy, upstream, client_key):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # codex_backend_client_should_send_compact_headers_in_fingerprint_order.
    account = make_pool_account("tok-a")
    make_cookie(account=account, domain="127.0.0.1", path="/", value="old")

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        data=json.dumps(
            {
                "model": "gpt-5.4",
                "input": [],
                "client_metadata": {"x-openai-subagent": "review"},
                **EVERY_CONTEXT_VALUE,
            }
        ),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 200
    [sent] = upstream.server.requests_to("/codex/responses/compact")
    # No accept, turn state, turn metadata, beta features, timing metrics, version or
    # subagent on a compact call (spec §2.3).
    assert _names(sent) == [
        "host",
        *BASE_HEADERS,
        "content-type",
        "cookie",
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "session-id",
        "thread-id",
        "x-codex-turn-id",
        "x-codex-window-id",
        "x-codex-parent-thread-id",
    ]


def test_the_websocket_opening_puts_the_upgrade_headers_around_the_business_headers(
    proxy, upstream, client_key
):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # websocket_connection_should_build_standard_opening_headers_around_business_headers and
    # codex_backend_client_websocket_should_forward_security_chain_headers_and_payload_fields
    # (no content-type, no accept on the opening).
    make_pool_account("tok-a", chatgpt_account_id="org-123")

    post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False, **EVERY_CONTEXT_VALUE})

    [sent] = upstream.websocket_requests()
    assert _names(sent) == [
        "host",
        "connection",
        "upgrade",
        "sec-websocket-version",
        "sec-websocket-key",
        *BASE_HEADERS,
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "session-id",
        "thread-id",
        "x-codex-turn-id",
        "x-codex-window-id",
        "x-codex-turn-state",
        "x-codex-turn-metadata",
        "x-codex-beta-features",
        "x-responsesapi-include-timing-metrics",
        "version",
        "x-codex-parent-thread-id",
        "sec-websocket-extensions",
    ]
    assert sent.header("sec-websocket-extensions") == "permessage-deflate; client_max_window_bits"


def test_the_usage_check_sends_only_the_usage_headers(proxy, upstream, client_key):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # codex_backend_client_usage_should_use_wham_usage_headers.
    limited = make_pool_account("tok-a", quota_verify_required=True)
    make_cookie(account=limited, domain="127.0.0.1", path="/", value="old")
    upstream.usage["tok-a"] = _usage_payload(20)

    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok

    [sent] = upstream.server.requests_to("/codex/usage")
    assert sent.headers[1:] == [
        ("user-agent", "Codex Desktop/26.519.81530 (darwin; arm64)"),
        ("authorization", "Bearer tok-a"),
        ("originator", "Codex Desktop"),
        ("chatgpt-account-id", "org-tok-a"),
        ("cookie", "cf_clearance=old"),
        ("accept", "application/json"),
        # what the original's HTTP client (reqwest) adds by itself
        ("accept-encoding", "gzip, br, zstd, deflate"),
    ]
    for absent in ("x-codex-installation-id", "x-client-request-id", "sec-ch-ua", "openai-beta"):
        assert sent.header(absent) is None


def test_pseudonyms_are_stable_per_account_and_differ_across_accounts(proxy, upstream, client_key):
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    RuntimeSettings.objects.update(rotation_strategy="round_robin")
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "prompt_cache_key": "conversation-42",
        "session_id": "session-7",
        "client_metadata": {"session_id": "session-7", "x-client-request-id": "mine"},
    }

    for _ in range(2):
        assert post_responses(proxy, client_key, body).status_code == 200
    # Affinity keeps the conversation on its account; the third turn goes elsewhere only when
    # that account can no longer serve.
    first_token, second_token = upstream.tokens_called()
    assert first_token == second_token
    Account.objects.filter(access_token=first_token).update(status="disabled")
    assert post_responses(proxy, client_key, body).status_code == 200

    sent = upstream.responses_requests()
    first_a, second_a, first_b = sent
    assert first_b.header("authorization") != first_a.header("authorization")
    for field in ("prompt_cache_key", "session_id"):
        assert first_a.json()[field] == second_a.json()[field]
        assert first_a.json()[field] != first_b.json()[field]
        assert first_a.json()[field].startswith("wi_")
    metadata = first_a.json()["client_metadata"]
    assert metadata["session_id"] == first_a.json()["session_id"]
    # The client's own request id replaced by the account's, as in the header (not dropped).
    assert metadata["x-client-request-id"] == first_a.header("x-client-request-id")
    assert metadata["x-client-request-id"].startswith("cr_")
    assert metadata["x-codex-installation-id"] == first_a.header("x-codex-installation-id")
    assert "mine" not in json.dumps([request.json() for request in sent])
    assert first_a.header("x-codex-installation-id") == second_a.header("x-codex-installation-id")
    assert first_a.header("x-codex-installation-id") != first_b.header("x-codex-installation-id")
    assert "conversation-42" not in json.dumps([request.json() for request in sent])


def test_cookies_are_replayed_by_path_longest_first(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    host = "127.0.0.1"
    make_cookie(account=account, domain=host, path="/", value="root")
    make_cookie(account=account, domain=host, path="/codex", value="codex")
    make_cookie(account=account, domain=host, path="/other", value="other")
    make_cookie(account=account, domain="chatgpt.com", path="/", value="elsewhere")
    make_cookie(
        account=account,
        domain=host,
        path="/codex/responses",
        name="cf_clearance",
        value="gone",
        expires_at=timezone.now() - timedelta(seconds=1),
    )

    post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    [sent] = upstream.responses_requests()
    assert sent.header("cookie") == "cf_clearance=codex; cf_clearance=root"


def test_cf_clearance_is_captured_from_an_answer(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            headers={
                "Set-Cookie": "cf_clearance=fresh-value; Path=/; Max-Age=3600; Secure; HttpOnly"
            }
        ),
    )

    post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    proxy.drain()

    cookie = AccountCookie.objects.get(account=account)
    assert (cookie.name, cookie.value, cookie.domain, cookie.path) == (
        "cf_clearance",
        "fresh-value",
        "127.0.0.1",
        "/",
    )
    assert (
        timezone.now() + timedelta(minutes=59)
        < cookie.expires_at
        <= timezone.now() + timedelta(minutes=61)
    )


def test_passive_quota_sync_from_rate_limit_headers(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            headers={
                "x-codex-primary-used-percent": "100",
                "x-codex-primary-window-minutes": "300",
                "x-codex-primary-reset-after-seconds": "600",
                "x-codex-secondary-used-percent": "40",
                "x-codex-secondary-window-minutes": "10080",
                "x-codex-plan-type": "plus",
                "x-codex-rate-limit-reached-type": "primary",
            }
        ),
    )

    assert (
        post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).status_code == 200
    )
    proxy.drain()

    stored = Account.objects.get(pk=account.pk)
    assert (stored.quota_limit_reached, stored.status, stored.plan_type) == (
        True,
        "quota_exhausted",
        "plus",
    )
    assert (
        timezone.now() + timedelta(seconds=590)
        < stored.quota_cooldown_until
        < timezone.now() + timedelta(seconds=610)
    )
    core = stored.quota_json["snapshots"][0]
    assert (core["primary"]["used_percent"], core["primary"]["window_minutes"]) == (100.0, 300)
    assert core["secondary"]["used_percent"] == 40.0
    usage = AccountUsage.objects.get(account=account)
    assert usage.limit_window_seconds == 18000
    assert usage.window_reset_at == stored.quota_cooldown_until


def test_passive_sync_keeps_what_the_headers_do_not_carry(proxy, upstream, client_key):
    additional = {
        "source": "additional",
        "limit_name": "codex_other",
        "metered_feature": "codex_other",
        "allowed": True,
        "limit_reached": False,
        "blocked": False,
        "primary": None,
        "secondary": None,
    }
    credits = {"has_credits": True, "balance": "5", "overage_limit_reached": False}
    account = make_pool_account(
        "tok-a",
        plan_type="pro",
        quota_json={
            "plan_type": "pro",
            "snapshots": [{"source": "core", "primary": None}, additional],
            "monthly_limit": None,
            "credits": credits,
            "spend_control": None,
        },
    )
    upstream.program(
        "tok-a",
        Reply(
            headers={
                "x-codex-primary-used-percent": "25",
                "x-codex-primary-window-minutes": "300",
            }
        ),
    )

    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok
    proxy.drain()

    stored = Account.objects.get(pk=account.pk)
    core, kept = stored.quota_json["snapshots"]
    assert (core["source"], core["primary"]["used_percent"]) == ("core", 25.0)
    assert kept == additional
    assert stored.quota_json["credits"] == credits
    assert (stored.quota_json["plan_type"], stored.plan_type) == ("pro", "pro")
    assert stored.quota_fetched_at is not None


def test_an_unchanged_quota_snapshot_writes_nothing(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    reset_at = int(time.time()) + 3600
    headers = {
        "x-codex-primary-used-percent": "40",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset_at),
    }
    upstream.program("tok-a", Reply(headers=headers), Reply(headers=headers))

    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok
    proxy.drain()
    first = Account.objects.get(pk=account.pk)
    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok
    proxy.drain()
    second = Account.objects.get(pk=account.pk)

    assert first.quota_json["snapshots"][0]["primary"]["reset_at"] == reset_at
    assert (second.quota_fetched_at, second.updated_at) == (
        first.quota_fetched_at,
        first.updated_at,
    )
    assert second.quota_json == first.quota_json


def test_usage_is_read_from_wham_usage_under_a_backend_api_base(
    proxy, upstream, client_key, settings
):
    settings.CODEX_UPSTREAM_BASE = f"{upstream.url}/backend-api"
    limited = make_pool_account("tok-a", quota_verify_required=True)
    upstream.usage["tok-a"] = _usage_payload(20)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200
    usage_calls = [request.path for request in upstream.requests if "usage" in request.path]
    assert usage_calls == ["/backend-api/wham/usage"]
    assert upstream.server.requests_to("/backend-api/codex/responses")
    stored = Account.objects.get(pk=limited.pk)
    assert (stored.quota_verify_required, stored.plan_type) == (False, "pro")


def test_usage_falls_back_to_codex_usage_when_wham_usage_is_missing(
    proxy, upstream, client_key, settings
):
    settings.CODEX_UPSTREAM_BASE = f"{upstream.url}/backend-api"
    upstream.usage_paths_missing.add("/backend-api/wham/usage")
    limited = make_pool_account("tok-a", quota_verify_required=True)
    upstream.usage["tok-a"] = _usage_payload(20)

    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok

    usage_calls = [request.path for request in upstream.requests if "usage" in request.path]
    assert usage_calls == ["/backend-api/wham/usage", "/backend-api/codex/usage"]
    assert Account.objects.get(pk=limited.pk).quota_verify_required is False


def _usage_payload(used_percent: float) -> dict:
    return {
        "plan_type": "pro",
        "rate_limit": {
            "allowed": used_percent < 100,
            "limit_reached": used_percent >= 100,
            "primary_window": {
                "used_percent": used_percent,
                "limit_window_seconds": 18000,
                "reset_after_seconds": 900,
            },
            "secondary_window": None,
        },
    }


@pytest.mark.parametrize(
    ("usage", "served_by", "status_after"),
    [
        (_usage_payload(100), "tok-b", "quota_exhausted"),  # still limited: skipped, not counted
        (_usage_payload(20), "tok-a", "active"),  # verified: serves, flag cleared
        (500, "tok-a", "active"),  # usage endpoint broken: go ahead anyway
    ],
)
def test_quota_verification_outcomes(proxy, upstream, client_key, usage, served_by, status_after):
    limited = make_pool_account("tok-a", quota_verify_required=True)
    make_pool_account("tok-b")
    upstream.usage["tok-a"] = usage

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200
    assert upstream.tokens_called() == [served_by]
    stored = Account.objects.get(pk=limited.pk)
    assert stored.status == status_after
    usage_calls = upstream.server.requests_to("/codex/usage")
    assert [request.header("authorization") for request in usage_calls] == ["Bearer tok-a"]
    if isinstance(usage, dict):
        assert stored.quota_verify_required is False and stored.plan_type == "pro"


def test_when_every_account_is_busy_the_request_waits_for_a_slot(proxy, upstream, client_key):
    RuntimeSettings.objects.update(max_concurrent_per_account=1, request_interval_ms=0)
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=10, delta_delay=0.1), Reply())
    results = {}

    def slow() -> None:
        results["slow"] = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    thread = threading.Thread(target=slow)
    thread.start()
    deadline = time.monotonic() + 5
    while not upstream.responses_requests() and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    thread.join()

    assert results["slow"].status_code == 200 and waiting.status_code == 200
    assert upstream.max_in_flight["tok-a"] == 1
    first, second = upstream.responses_requests()
    assert second.received_at >= first.received_at + 0.9  # started after the slow one ended


def test_same_account_starts_are_paced_by_the_interval(proxy, upstream, client_key):
    RuntimeSettings.objects.update(max_concurrent_per_account=3, request_interval_ms=400)
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=20, delta_delay=0.05), Reply())
    results = {}
    thread = threading.Thread(
        target=lambda: results.setdefault(
            "first", post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})
        )
    )
    thread.start()
    deadline = time.monotonic() + 5
    while not upstream.responses_requests() and time.monotonic() < deadline:
        time.sleep(0.01)

    post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    thread.join()

    first, second = upstream.responses_requests()
    assert second.received_at - first.received_at >= 0.35
    assert upstream.max_in_flight["tok-a"] == 2


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_leaving_before_the_first_byte_frees_the_slot_at_once(
    proxy, upstream, client_key, stream
):
    import redis as redis_library
    from django.conf import settings

    account = make_pool_account("tok-slow")
    upstream.program("tok-slow", Reply(first_byte_delay=3))
    client = redis_library.Redis.from_url(settings.REDIS_URL)
    slots = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{account.id}"

    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(
            f"{proxy.url}/v1/responses",
            data=json.dumps({"model": "gpt-5.4", "stream": stream}),
            headers={"Authorization": f"Bearer {client_key.key}"},
            timeout=0.5,
        )
    deadline = time.monotonic() + 2
    while client.zcard(slots) and time.monotonic() < deadline:
        time.sleep(0.02)

    assert client.zcard(slots) == 0  # released when the client left, not after the TTL
    client.close()


def test_a_401_does_not_expire_a_token_refreshed_meanwhile(proxy, upstream, client_key):
    import asyncio

    from proxy.loop_resources import close_current_loop_resources
    from proxy.services.account_state import account_mark_expired as mark_expired

    account = make_pool_account("tok-old")
    Account.objects.filter(pk=account.pk).update(access_token="tok-fresh")

    def expire(token: str) -> None:
        async def on_a_fresh_loop() -> None:
            try:
                await mark_expired(account.id, token=token, now=timezone.now())
            finally:
                # The loop's pool must not outlive it (asyncio.run would cancel its tasks).
                await close_current_loop_resources()

        asyncio.run(on_a_fresh_loop())

    expire("tok-old")

    assert Account.objects.get(pk=account.pk).status == "active"
    expire("tok-fresh")
    assert Account.objects.get(pk=account.pk).status == "expired"
