"""A refused WebSocket upgrade is read like the HTTP answer it is (issue 34 item 4; spec §2.6,
§2.7, §3.6): each test gives the same upstream answer once over HTTP SSE and once at the
WebSocket upgrade (``transport``), and asserts one set of expectations for both — the account
state in PostgreSQL afterwards and the client's answer are the same.

Mirrors the original's
``backend/tests/upstream/openai/transport/websocket.rs::
websocket_execute_response_create_request_should_preserve_opening_error_status_body_and_retry_after``
(the opening's status, body and Retry-After survive) and, through the dispatch,
``backend/tests/dispatch/service/responses_websocket.rs::
responses_websocket_stream_first_error_429_should_retry_fallback_account`` (a 429 over the
WebSocket marks the account quota-limited and the next account serves).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.clients import codex
from proxy.loop_resources import close_current_loop_resources
from proxy.models import Account, AccountCookie
from tests.fakes.codex import CLOUDFLARE_CHALLENGE_PAGE, Reply
from tests.proxy.conftest import make_pool_account, post_responses, reset_rotation
from tests.proxy.factories import make_cookie

TRANSPORTS = ["http_sse", "websocket"]


@pytest.fixture
def pool(proxy, upstream):
    """Two accounts tried in the order a, b."""
    reset_rotation()
    return make_pool_account("tok-a"), make_pool_account("tok-b")


def _refuse(upstream, token: str, transport: str, status: int, body, **headers) -> None:
    """Program ``token``'s next answer: ``status`` with ``body``, to the HTTP call or at the
    WebSocket upgrade."""
    upstream.program(
        token,
        Reply(
            kind="status",
            status=status,
            body=body,
            headers=headers,
            ws_handshake=transport == "websocket",
        ),
    )


def _ask(proxy, key, transport: str, *, stream: bool = False):
    body = {"model": "gpt-5.4", "stream": stream, "input": [{"role": "user", "content": "hi"}]}
    if transport == "http_sse":
        body["use_websocket"] = False
    return post_responses(proxy, key, body)


def _stored(account) -> Account:
    return Account.objects.get(pk=account.pk)


def _assert_refused_on_the_transport(upstream, token: str, transport: str) -> None:
    """The refusal came from the transport under test, and the WebSocket's was not asked
    again over HTTP on the same account (an upstream status is an answer, not a broken
    socket)."""
    calls = [
        sent.method
        for sent in upstream.responses_requests()
        if sent.header("authorization") == f"Bearer {token}"
    ]
    if transport == "websocket":
        assert upstream.ws_refused[token] == 1
        assert calls == []  # no response.create (never upgraded) and no HTTP retry
    else:
        assert upstream.ws_refused[token] == 0
        assert calls == ["POST"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_cloudflare_page_rotates_and_cools_the_account_down(
    pool, proxy, upstream, client_key, transport
):
    account_a, account_b = pool
    make_cookie(account=account_a, expires_at=timezone.now() + timedelta(days=30))
    _refuse(upstream, "tok-a", transport, 403, CLOUDFLARE_CHALLENGE_PAGE)
    before = timezone.now()

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "Hello from the fake upstream."
    assert upstream.tokens_called()[-1] == "tok-b"
    _assert_refused_on_the_transport(upstream, "tok-a", transport)
    stored = _stored(account_a)
    assert stored.status == "active"  # a challenge says nothing against the account itself
    assert before + timedelta(seconds=9) <= stored.cloudflare_cooldown_until
    assert stored.cloudflare_cooldown_until <= timezone.now() + timedelta(seconds=11)
    assert (
        AccountCookie.objects.get(account=account_a).expires_at <= stored.cloudflare_cooldown_until
    )
    assert _stored(account_b).cloudflare_cooldown_until is None


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_cloudflare_page_on_the_only_account_is_the_exhausted_pools_answer(
    proxy, upstream, client_key, transport, stream
):
    # The outside check saw this page reach the client as 403 invalid_api_key.
    account = make_pool_account("tok-a")
    _refuse(upstream, "tok-a", transport, 403, CLOUDFLARE_CHALLENGE_PAGE)

    response = _ask(proxy, client_key, transport, stream=stream)

    message = (
        "All accounts exhausted (1 cloudflare-challenge). Codex upstream error: "
        + CLOUDFLARE_CHALLENGE_PAGE
    )[:120]
    if stream:
        # A stream's server-side failure is a 200 SSE failure event (spec §1.7).
        assert response.status_code == 200
        [failed] = [
            json.loads(line[6:]) for line in response.text.split("\n") if line.startswith("data: {")
        ]
        error = failed["response"]["error"]
        assert failed["type"] == "response.failed"
    else:
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["type"] == "server_error"
    assert error["code"] == "upstream_error"
    assert error["message"].startswith(message)
    assert "invalid_api_key" not in response.text
    assert _stored(account).cloudflare_cooldown_until is not None
    assert _stored(account).status == "active"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_429_with_retry_after_marks_the_account_and_the_next_serves(
    pool, proxy, upstream, client_key, transport, stream
):
    # The outside check saw a 429 at the upgrade leave the account active. Mirrors
    # backend/tests/dispatch/service/responses_websocket.rs::
    # responses_websocket_stream_first_error_429_should_retry_fallback_account
    account_a, _ = pool
    _refuse(
        upstream,
        "tok-a",
        transport,
        429,
        {"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached"}},
        **{"Retry-After": "120"},
    )
    before = timezone.now()

    response = _ask(proxy, client_key, transport, stream=stream)

    assert response.status_code == 200, response.text
    if stream:
        assert b"response.completed" in response.content
        assert b"usage_limit_reached" not in response.content  # never reached the client
    assert upstream.tokens_called()[-1] == "tok-b"
    _assert_refused_on_the_transport(upstream, "tok-a", transport)
    stored = _stored(account_a)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)
    assert before + timedelta(seconds=119) <= stored.quota_cooldown_until
    assert stored.quota_cooldown_until <= timezone.now() + timedelta(seconds=121)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_429_on_the_only_account_tells_the_client_when_to_come_back(
    proxy, upstream, client_key, transport
):
    account = make_pool_account("tok-a")
    _refuse(upstream, "tok-a", transport, 429, "rate limited", **{"Retry-After": "45"})

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 429
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert error["message"].startswith("All accounts exhausted (1 rate-limited).")
    stored = _stored(account)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)
    assert stored.quota_cooldown_until >= timezone.now() + timedelta(seconds=40)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_402_marks_the_account_quota_exhausted_without_a_cooldown(
    pool, proxy, upstream, client_key, transport
):
    account_a, _ = pool
    _refuse(upstream, "tok-a", transport, 402, {"detail": "payment required"})

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 200, response.text
    assert upstream.tokens_called()[-1] == "tok-b"
    stored = _stored(account_a)
    assert (stored.status, stored.quota_cooldown_until) == ("quota_exhausted", None)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_401_account_deactivated_bans_the_account(pool, proxy, upstream, client_key, transport):
    account_a, _ = pool
    _refuse(
        upstream,
        "tok-a",
        transport,
        401,
        {"error": {"message": "Your account has been deactivated", "code": "account_deactivated"}},
    )

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 200, response.text
    assert upstream.tokens_called()[-1] == "tok-b"
    _assert_refused_on_the_transport(upstream, "tok-a", transport)
    assert _stored(account_a).status == "banned"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_plain_401_expires_the_account(pool, proxy, upstream, client_key, transport):
    account_a, _ = pool
    _refuse(upstream, "tok-a", transport, 401, {"error": {"code": "token_expired"}})

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 200, response.text
    assert _stored(account_a).status == "expired"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_4xx_json_body_is_passed_through_verbatim_without_rotation(
    pool, proxy, upstream, client_key, transport
):
    account_a, account_b = pool
    body = {
        "error": {
            "message": "Input must be a list",
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        }
    }
    _refuse(upstream, "tok-a", transport, 400, body)

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 400
    assert response.json() == body
    assert upstream.tokens_called() == [] if transport == "websocket" else ["tok-a"]
    _assert_refused_on_the_transport(upstream, "tok-a", transport)
    assert upstream.ws_refused["tok-b"] == 0 and "tok-b" not in upstream.tokens_called()
    assert {_stored(account_a).status, _stored(account_b).status} == {"active"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_html_403_without_cloudflare_markers_is_returned_not_a_ban(
    pool, proxy, upstream, client_key, transport
):
    account_a, _ = pool
    _refuse(upstream, "tok-a", transport, 403, "<html><body>Forbidden</body></html>")

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert "tok-b" not in upstream.tokens_called()
    assert _stored(account_a).status == "active"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_5xx_is_asked_again_twice_on_the_same_account(
    pool, proxy, upstream, client_key, transport
):
    _refuse(upstream, "tok-a", transport, 502, "bad gateway")
    _refuse(upstream, "tok-a", transport, 503, "busy")

    response = _ask(proxy, client_key, transport)

    assert response.status_code == 200, response.text
    assert set(upstream.tokens_called()) == {"tok-a"}
    if transport == "websocket":
        assert upstream.ws_refused["tok-a"] == 2
        assert [sent.method for sent in upstream.responses_requests()] == ["WS"]
    else:
        assert len(upstream.http_requests()) == 3


# -- the client itself, against the fake directly


def _run(coroutine):
    async def run_and_close():
        try:
            return await coroutine
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())


@pytest.mark.django_db
def test_the_refused_upgrade_keeps_its_status_body_retry_after_and_cookies(upstream):
    # Mirrors backend/tests/upstream/openai/transport/websocket.rs::websocket_execute_
    # response_create_request_should_preserve_opening_error_status_body_and_retry_after
    upstream.program(
        "tok-ws",
        Reply(
            kind="status",
            status=429,
            body={"error": {"message": "rate limited"}},
            headers={"Retry-After": "33", "Set-Cookie": "cf_clearance=abc; Path=/"},
            ws_handshake=True,
        ),
    )
    from django.conf import settings

    headers = codex.build_headers(
        codex.Call.RESPONSES,
        fingerprint=codex.render_fingerprint(settings.CODEX_FINGERPRINT),
        credentials=codex.Credentials("acct_ws", "tok-ws", "org-ws"),
    )

    async def scenario():
        try:
            await codex.open_websocket_responses(
                body={"model": "gpt-5.4", "input": []},
                headers=headers,
                account_id="acct_ws",
                conversation_id="conv-refused",
            )
        except codex.CodexHTTPError as error:
            return error
        raise AssertionError("the refused upgrade was not an HTTP error")

    error = _run(scenario())

    assert error.status == 429
    assert error.headers["retry-after"] == "33"
    assert error.headers["content-type"].startswith("application/json")
    assert json.loads(error.body) == {"error": {"message": "rate limited"}}
    assert error.set_cookies == ("cf_clearance=abc; Path=/",)
    assert error.permanent is False
    assert upstream.ws_refused["tok-ws"] == 1 and upstream.ws_connections["tok-ws"] == 0
