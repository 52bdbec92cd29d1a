"""The Codex client (``proxy/clients/codex``): the one header builder for every backend call,
the 5xx retry inside the client, and typed answers and errors with a ``permanent`` flag."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from proxy import identity
from proxy.clients import codex
from proxy.loop_resources import close_current_loop_resources
from tests.fakes.codex import Reply

CREDENTIALS = codex.Credentials("acct_client", "tok-client", "org-client")


def _run(coroutine):
    async def run_and_close():
        try:
            return await coroutine
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())


def _fingerprint() -> codex.FingerprintHeaders:
    return codex.render_fingerprint(settings.CODEX_FINGERPRINT)


@pytest.mark.parametrize(
    ("status", "permanent"),
    [(400, True), (401, True), (403, True), (404, True), (429, False), (500, False), (503, False)],
)
def test_an_http_error_is_permanent_for_4xx_but_not_429_or_5xx(status, permanent):
    assert codex.CodexHTTPError(status, {}, b"").permanent is permanent
    assert codex.CodexTransportError("ClientConnectorError").permanent is False


BASE = [
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


def test_every_call_gets_its_headers_from_the_one_builder_in_the_originals_order():
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # ordered_codex_headers_should_preserve_fingerprint_priority_and_request_fields (the
    # fingerprint's order ranks the base headers only; what a call adds follows in its own order).
    fingerprint = _fingerprint()
    per_request = {
        "x-client-request-id": "cr_1",
        "x-codex-installation-id": "install-1",
        "session-id": "wi_1",
        "x-codex-turn-state": "ts",
        "x-openai-subagent": "review",
    }

    headers = {
        call: codex.build_headers(
            call,
            fingerprint=fingerprint,
            credentials=CREDENTIALS,
            request_headers=per_request,
            cookie="cf_clearance=c",
        )
        for call in codex.Call
    }

    assert [name for name, _ in headers[codex.Call.RESPONSES]] == [
        *BASE,
        "content-type",
        "cookie",
        "accept",
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "session-id",
        "x-codex-turn-state",
        "x-openai-subagent",
    ]
    assert [name for name, _ in headers[codex.Call.COMPACT]] == [
        *BASE,
        "content-type",
        "cookie",
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "session-id",
    ]
    # usage: no fingerprint headers, no installation id; the HTTP client's accept-encoding.
    assert headers[codex.Call.USAGE] == [
        ("user-agent", "Codex Desktop/26.519.81530 (darwin; arm64)"),
        ("authorization", "Bearer tok-client"),
        ("originator", "Codex Desktop"),
        ("chatgpt-account-id", "org-client"),
        ("cookie", "cf_clearance=c"),
        ("accept", "application/json"),
        ("accept-encoding", "gzip, br, zstd, deflate"),
    ]
    models = headers[codex.Call.MODELS]
    assert [name for name, _ in models] == [
        *BASE,
        "cookie",
        "accept",
        "x-codex-installation-id",
    ]
    assert dict(models)["accept-encoding"] == "gzip, deflate"  # in the fingerprint's place
    assert dict(models)["accept"] == "application/json"
    assert dict(models)["x-codex-installation-id"] == identity.installation_id("acct_client")
    responses = dict(headers[codex.Call.RESPONSES])
    assert responses["authorization"] == "Bearer tok-client"
    assert responses["x-client-request-id"] == "cr_1"
    assert responses["x-codex-turn-state"] == "ts"
    assert responses["accept"] == "text/event-stream"
    assert responses["accept-encoding"] == "gzip, deflate, br, zstd"  # the fingerprint's


def test_a_call_without_account_id_or_per_request_values_leaves_them_out():
    fingerprint = _fingerprint()
    credentials = codex.Credentials("acct_bare", "tok-bare", None)

    responses = codex.build_headers(
        codex.Call.RESPONSES, fingerprint=fingerprint, credentials=credentials
    )

    names = [name for name, _ in responses]
    assert "chatgpt-account-id" not in names and "cookie" not in names
    assert names[-3:] == [
        "openai-beta",
        "x-openai-internal-codex-residency",
        "x-codex-installation-id",
    ]
    assert dict(responses)["x-codex-installation-id"] == identity.installation_id("acct_bare")


def test_a_5xx_is_asked_again_twice_inside_the_client(upstream):
    upstream.program(
        "tok-client",
        Reply(kind="status", status=502, body="bad gateway", headers={"Set-Cookie": "a=1"}),
        Reply(kind="status", status=503, body="unavailable"),
        Reply(),
    )
    headers = codex.build_headers(
        codex.Call.RESPONSES, fingerprint=_fingerprint(), credentials=CREDENTIALS
    )

    async def open_and_read():
        stream = await codex.open_responses(body=b'{"model":"gpt-5.4"}', headers=headers)
        body = b"".join([chunk async for chunk in stream.chunks()])
        stream.release()
        return stream, body

    stream, body = _run(open_and_read())

    assert len(upstream.responses_requests()) == 3
    assert stream.status == 200 and b"response.completed" in body
    assert stream.set_cookies == ("a=1",)


def test_a_5xx_that_persists_is_a_typed_error_after_three_tries(upstream):
    for _ in range(3):
        upstream.program("tok-client", Reply(kind="status", status=500, body="boom"))
    headers = codex.build_headers(
        codex.Call.RESPONSES, fingerprint=_fingerprint(), credentials=CREDENTIALS
    )

    with pytest.raises(codex.CodexHTTPError) as raised:
        _run(codex.open_responses(body=b"{}", headers=headers))

    assert (raised.value.status, raised.value.body, raised.value.permanent) == (500, b"boom", False)
    assert len(upstream.responses_requests()) == 3


def test_a_4xx_is_not_asked_again(upstream):
    upstream.program("tok-client", Reply(kind="status", status=400, body={"error": "no"}))
    headers = codex.build_headers(
        codex.Call.RESPONSES, fingerprint=_fingerprint(), credentials=CREDENTIALS
    )

    with pytest.raises(codex.CodexHTTPError) as raised:
        _run(codex.open_responses(body=b"{}", headers=headers))

    assert raised.value.permanent and raised.value.headers["content-type"].startswith(
        "application/json"
    )
    assert len(upstream.responses_requests()) == 1


def test_an_unreachable_upstream_is_a_transport_error(settings):
    from tests.conftest import free_port

    settings.CODEX_UPSTREAM_BASE = f"http://127.0.0.1:{free_port()}"
    headers = codex.build_headers(
        codex.Call.USAGE, fingerprint=_fingerprint(), credentials=CREDENTIALS
    )

    with pytest.raises(codex.CodexTransportError):
        _run(codex.usage(headers=headers))
