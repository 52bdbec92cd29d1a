"""Mends of issue 15, each a behaviour the old request path got wrong: content codings the
upstream session cannot decode were advertised, the client's raw request id reached the
upstream body, "all accounts busy" spoke of "no account", the ops message of an upstream
refusal said "dispatch failed", and a key touched during a flush waited for a later touch."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from proxy import identity
from proxy.loop_resources import close_current_loop_resources
from proxy.models import ClientApiKey, RuntimeSettings
from proxy.services.client_api_keys import client_api_key_create
from proxy.v1.auth import TOUCH_DEBOUNCE_SECONDS, KeyTouches
from telemetry.models import OpsErrorLog
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses


def _output_text(response) -> str:
    return "".join(
        part["text"]
        for item in response.json()["output"]
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    )


def test_every_content_coding_sent_upstream_is_one_the_proxy_decodes(proxy, upstream, client_key):
    make_pool_account("tok-a")
    post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    [first] = upstream.responses_requests()
    advertised = [
        coding.split(";")[0].strip() for coding in first.header("accept-encoding").split(",")
    ]
    assert "gzip" in advertised

    for coding in advertised:
        upstream.program("tok-a", Reply(text=f"decoded from {coding}", content_encoding=coding))
        response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

        assert response.status_code == 200, (coding, response.text)
        assert _output_text(response) == f"decoded from {coding}"


def test_the_fingerprints_codings_br_and_zstd_are_advertised_and_decoded(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(text="brotli", content_encoding="br"))
    upstream.program("tok-a", Reply(text="zstandard", content_encoding="zstd"))

    brotli = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    zstandard = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert upstream.responses_requests()[0].header("accept-encoding") == "gzip, deflate, br, zstd"
    assert (_output_text(brotli), _output_text(zstandard)) == ("brotli", "zstandard")


def test_the_clients_request_id_never_reaches_the_upstream_body_unscoped(
    proxy, upstream, client_key
):
    account = make_pool_account("tok-a")
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "client_metadata": {"x-client-request-id": "client-own-id-42", "other": "kept"},
    }

    post_responses(proxy, client_key, body)

    [sent] = upstream.responses_requests()
    assert "client-own-id-42" not in sent.body.decode()
    # Replaced in place by the account's id, as the header carries it (the original's
    # response_client_metadata); the installation id added after the client's keys.
    assert list(json.loads(sent.body)["client_metadata"].items()) == [
        ("x-client-request-id", sent.header("x-client-request-id")),
        ("other", "kept"),
        ("x-codex-installation-id", identity.installation_id(account.id)),
    ]
    assert sent.header("x-client-request-id").startswith("cr_")


def test_all_accounts_busy_says_so_in_a_stream(proxy, upstream, client_key, settings):
    settings.SCHEDULER_WAIT_TIMEOUT_SECONDS = 0
    RuntimeSettings.objects.update(max_concurrent_per_account=1, request_interval_ms=0)
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=10, delta_delay=0.1))
    thread = threading.Thread(
        target=post_responses, args=(proxy, client_key, {"model": "gpt-5.4", "input": []})
    )
    thread.start()
    deadline = time.monotonic() + 5
    while not upstream.responses_requests() and time.monotonic() < deadline:
        time.sleep(0.01)

    busy = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})
    thread.join()

    assert busy.status_code == 200
    assert b"All accounts are at their concurrency limit. Retry the request." in busy.content
    assert b"No active upstream account" not in busy.content
    assert len(upstream.responses_requests()) == 1  # nothing was sent for the busy request


def test_an_upstream_4xx_is_logged_as_the_upstream_refusing_not_as_a_dispatch_failure(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    refusal = {"error": {"message": "Invalid 'input'", "type": "invalid_request_error"}}
    upstream.program("tok-a", Reply(kind="status", status=400, body=refusal))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 400
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert (row.message, row.failure_class, row.upstream_status_code) == (
        "v1 responses upstream rejected the request",
        "upstream",
        400,
    )


def test_a_stream_that_fails_before_any_output_is_logged_as_such(proxy, upstream, client_key):
    make_pool_account("tok-a")
    # response.created, then EOF: over the WebSocket and over its HTTP SSE fallback (§1.8).
    upstream.program("tok-a", *[Reply(kind="eof", cut_after=1)] * 2)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200  # a stream's 5xx-class failure is an SSE event
    assert b"response.failed" in response.content
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert row.message == "v1 responses upstream stream failed before any output"
    assert row.failure_class == "upstream_unavailable"
    assert row.metadata_json["error"] == "upstream stream ended before any output"


@pytest.mark.django_db(transaction=True)
def test_a_key_touched_during_a_flush_is_written_without_another_touch():
    now = timezone.now()
    first = client_api_key_create(name="first", now=now)
    second = client_api_key_create(name="second", now=now)
    flush_started = threading.Event()
    release_lock = threading.Event()

    def scenario() -> None:
        async def touch_twice() -> None:
            touches = KeyTouches()
            touches.touch(first.id)
            # The debounce passes and the flush starts; it waits on the row lock below.
            await asyncio.sleep(TOUCH_DEBOUNCE_SECONDS + 0.3)
            flush_started.set()
            touches.touch(second.id)  # arrives while that flush runs
            release_lock.set()
            for _ in range(40):  # no further touch: only the pending one is written
                await asyncio.sleep(0.1)
                if not touches._pending and touches._flush_task.done():
                    break
            await close_current_loop_resources()

        asyncio.run(touch_twice())

    with transaction.atomic():
        list(ClientApiKey.objects.select_for_update().filter(pk=first.pk))
        worker = threading.Thread(target=scenario)
        worker.start()
        flush_started.wait(10)
        release_lock.wait(10)
    connection.close()
    worker.join(15)

    assert not worker.is_alive()
    stamps = dict(ClientApiKey.objects.values_list("id", "last_used_at"))
    assert stamps[first.id] is not None
    assert stamps[second.id] is not None
