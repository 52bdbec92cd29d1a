"""The upstream WebSocket pool lets go of what it no longer serves (issue 34 item 5, spec §2.7,
§6.3): the sweep closes the socket of a reservation it forgets; an account whose status an
operator changes — in the admin API or the Django admin, both ending in
``account_update_by_admin`` — has its pooled sockets evicted, in every web process (each
learns of the change from the pool snapshot's version: on its next request, or on the sweep
when it serves none).

Mirrors the original's ``backend/tests/upstream/transport/websocket_pool.rs::
codex_backend_client_should_close_idle_pooled_websocket_when_account_is_evicted`` (an evicted
account's idle socket gets a close frame, its next request a fresh socket) and
``websocket_pool_should_gc_expired_idle_connections`` (the maintenance sweep closes what is
past its max age; the original's sweep also drops stale busy reservations,
``take_expired_slots``).
"""

from __future__ import annotations

import asyncio
import time

import pytest
import requests
from django.conf import settings as django_settings
from django.contrib.admin.utils import quote
from django.utils import timezone

from proxy.clients import codex
from proxy.clients.codex.ws_pool import websocket_pool
from proxy.loop_resources import close_current_loop_resources
from proxy.models import Account
from proxy.services.accounts import account_update_by_admin
from proxy.services.admin_users import admin_user_create_default
from proxy.sessions import admin_session_login
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account, post_responses
from tests.proxy.test_admin_console import browser_submission


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def _until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# -- the pool itself, against the fake directly


def _run(coroutine):
    async def run_and_close():
        try:
            return await coroutine
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())


def _headers(token: str) -> list[tuple[str, str]]:
    return codex.build_headers(
        codex.Call.RESPONSES,
        fingerprint=codex.render_fingerprint(django_settings.CODEX_FINGERPRINT),
        credentials=codex.Credentials(f"acct_{token}", token, f"org-{token}"),
    )


async def _open(token: str, conversation: str = "conv-1") -> codex.CodexWebSocketStream:
    return await codex.open_websocket_responses(
        body={"model": "gpt-5.4", "input": [], "stream": True},
        headers=_headers(token),
        account_id=f"acct_{token}",
        conversation_id=conversation,
    )


async def _read(stream: codex.CodexWebSocketStream) -> bytes:
    chunks = [chunk async for chunk in stream.chunks()]
    stream.release()
    return b"".join(chunks)


@pytest.mark.django_db
def test_the_sweep_closes_the_socket_of_a_reservation_it_forgets(upstream, settings):
    # Mirrors websocket_pool.rs::websocket_pool_should_gc_expired_idle_connections, for the
    # sweep's other half: a stale busy reservation (the original's take_expired_slots).
    # A request that never ended holds its lease: its response is still being sent.
    upstream.program("tok-ws", Reply(stall_after=1, stall_seconds=30))
    settings.CODEX_WS_MAX_AGE_SECONDS = 1

    async def scenario() -> tuple[bool, bool, bool]:
        forgotten = await _open("tok-ws")
        assert upstream.ws_open["tok-ws"] == 1
        pool = websocket_pool.get_or_create()
        await asyncio.sleep(1.1)  # the reservation is now older than the max age

        pool.sweep()

        closed = await _until(lambda: upstream.ws_open["tok-ws"] == 0, 5)
        # The slot is free again: the conversation's next request holds it (pooled).
        lease = pool.lease(
            (django_settings.CODEX_UPSTREAM_BASE, "acct_tok-ws", "conv-1"), "acct_tok-ws"
        )
        pooled = lease.pooled and lease.socket is None
        pool.drop(lease)
        forgotten.close()
        return closed, pooled, "tok-ws" in upstream.disconnects

    closed, pooled, seen_leaving = _run(scenario())

    assert closed, "the sweep forgot the reservation but left its socket open"
    assert seen_leaving  # the upstream stopped answering (its caller closed mid-answer)
    assert pooled
    assert upstream.known_response_ids["tok-ws"] == set()


@pytest.mark.django_db
def test_evicting_an_account_closes_its_idle_sockets_and_no_others(upstream):
    # Mirrors websocket_pool.rs::
    # codex_backend_client_should_close_idle_pooled_websocket_when_account_is_evicted
    async def scenario() -> tuple[bool, int, int]:
        await _read(await _open("tok-ws"))
        await _read(await _open("tok-other"))
        assert (upstream.ws_open["tok-ws"], upstream.ws_open["tok-other"]) == (1, 1)
        pool = websocket_pool.get_or_create()

        assert pool.evict_account("acct_tok-ws") == 1

        closed = await _until(lambda: upstream.ws_open["tok-ws"] == 0, 5)
        await asyncio.sleep(0.2)  # time for a wrong close to show
        others_open = upstream.ws_open["tok-other"]
        await _read(await _open("tok-ws"))  # the next request: a fresh socket
        return closed, others_open, upstream.ws_connections["tok-ws"]

    closed, others_open, connections = _run(scenario())

    assert closed
    assert others_open == 1
    assert connections == 2


@pytest.mark.django_db
def test_an_evicted_socket_in_use_finishes_its_response_then_closes(upstream):
    # The original's evict_account (websocket_pool.rs): idle sockets closed, busy slots kept
    # from going back to the pool.
    upstream.program("tok-ws", Reply(deltas=6, delta_delay=0.05))

    async def scenario() -> tuple[bytes, bool, int]:
        stream = await _open("tok-ws")
        pool = websocket_pool.get_or_create()

        assert pool.evict_account("acct_tok-ws") == 1

        body = await _read(stream)
        closed = await _until(lambda: upstream.ws_open["tok-ws"] == 0, 5)
        return body, closed, pool.idle_count()

    body, closed, idle = _run(scenario())

    assert b"event: response.completed" in body  # the response in flight was not cut
    assert upstream.disconnects == []
    assert closed and idle == 0  # …but its socket did not go back to the pool


# -- an operator's status change, through the proxy


def _ask(proxy, key, conversation: str):
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "input": [{"role": "user", "content": "hi"}],
        "prompt_cache_key": conversation,
    }
    response = post_responses(proxy, key, body)
    assert response.status_code == 200, response.text
    return response


@pytest.fixture
def two_pooled(proxy, upstream, client_key):
    """Accounts a and b, each holding one idle pooled socket of the proxy (a served the first
    conversation; the second went to b, the account with fewer requests in its window)."""
    account_a = make_pool_account("tok-a")
    account_b = make_pool_account("tok-b")
    _ask(proxy, client_key, "conv-a")
    proxy.drain()
    _ask(proxy, client_key, "conv-b")
    assert upstream.tokens_called() == ["tok-a", "tok-b"]
    assert (upstream.ws_open["tok-a"], upstream.ws_open["tok-b"]) == (1, 1)
    return account_a, account_b


def _assert_only_a_was_evicted(upstream) -> None:
    assert _wait_for(lambda: upstream.ws_open["tok-a"] == 0, 5), "a's socket stayed open"
    time.sleep(0.2)  # time for a wrong eviction to show
    assert upstream.ws_open["tok-b"] == 1
    assert upstream.ws_connections["tok-b"] == 1  # b's socket was kept (and reused)


def test_disabling_an_account_in_the_admin_api_evicts_its_sockets(
    two_pooled, proxy, upstream, client_key
):
    account_a, _ = two_pooled
    admin = admin_user_create_default(password="operator passphrase", now=timezone.now())
    token, _ = admin_session_login(user=admin, now=timezone.now())

    # The admin API of the running server (its request thread, not the request path's loop).
    response = requests.post(
        f"{proxy.url}/api/admin/accounts/update",
        json={"id": account_a.pk, "status": "disabled"},
        cookies={"cpr_admin_session": token},
        timeout=10,
    )
    assert response.status_code == 200, response.content
    # The next request (b's conversation) brings the new snapshot to the proxy's pool.
    _ask(proxy, client_key, "conv-b")

    _assert_only_a_was_evicted(upstream)
    assert upstream.tokens_called() == ["tok-a", "tok-b", "tok-b"]


def test_disabling_an_account_in_the_django_admin_evicts_its_sockets(
    two_pooled, proxy, upstream, client_key, client
):
    account_a, _ = two_pooled
    operator = admin_user_create_default(password="operator passphrase", now=timezone.now())
    client.force_login(operator)
    url = f"/admin/proxy/account/{quote(account_a.pk)}/change/"

    response = client.post(url, browser_submission(client.get(url), status="disabled"))
    assert response.status_code == 302
    assert Account.objects.get(pk=account_a.pk).status == "disabled"
    _ask(proxy, client_key, "conv-b")

    _assert_only_a_was_evicted(upstream)


def test_enabling_an_account_again_gives_it_a_fresh_socket(two_pooled, proxy, upstream, client_key):
    account_a, _ = two_pooled
    account_update_by_admin(account=account_a, label=None, status="disabled", now=timezone.now())
    _ask(proxy, client_key, "conv-b")
    assert _wait_for(lambda: upstream.ws_open["tok-a"] == 0, 5)

    account_update_by_admin(account=account_a, label=None, status="active", now=timezone.now())
    _ask(proxy, client_key, "conv-a")

    assert upstream.tokens_called()[-1] == "tok-a"
    assert upstream.ws_connections["tok-a"] == 2


@pytest.mark.subprocess
def test_a_process_serving_no_requests_evicts_on_its_sweep(upstream, transactional_db, client_key):
    """The status change is made in this (test) process; the proxy process holding the
    sockets gets no request after it and still closes a's socket, on its sweep."""
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    account_a = make_pool_account("tok-a")
    account_b = make_pool_account("tok-b")
    process = UvicornProcess(upstream.url, CODEX_WS_SWEEP_SECONDS="1")
    try:
        for conversation in ("conv-a", "conv-b"):
            response = post_responses(
                process,
                client_key,
                {
                    "model": "gpt-5.4",
                    "stream": False,
                    "input": [],
                    "prompt_cache_key": conversation,
                },
            )
            assert response.status_code == 200, response.text
            time.sleep(0.5)  # the ledger's usage write: conv-b goes to the account with fewer
        assert sorted(upstream.tokens_called()) == ["tok-a", "tok-b"]
        assert (upstream.ws_open["tok-a"], upstream.ws_open["tok-b"]) == (1, 1)

        account_update_by_admin(
            account=Account.objects.get(pk=account_a.pk),
            label=None,
            status="disabled",
            now=timezone.now(),
        )

        assert _wait_for(lambda: upstream.ws_open["tok-a"] == 0, 10), "a's socket stayed open"
        time.sleep(1.5)  # another sweep: b's socket must survive it
        assert upstream.ws_open["tok-b"] == 1
        assert len(upstream.responses_requests()) == 2  # no request made it happen
    finally:
        process.stop()
    assert Account.objects.get(pk=account_b.pk).status == "active"
