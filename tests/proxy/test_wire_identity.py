"""No client identity crosses accounts (spec §2.5, issue 34 item 2): what a Codex CLI sends —
its installation id, session, thread, turn, window and request ids, its turn metadata — reaches
each account only as that account's values, over HTTP SSE, the upstream WebSocket and compact.

The requests are the real Codex CLI 0.171.0's (``fixtures/codex_cli_0.171.0_requests.json``,
captured from ``codex exec``); ``test_codex_cli.py`` runs the CLI itself through the proxy.
The expected pseudonyms are computed here from the spec's formula (HMAC-SHA256 of
``domain \\0 account \\0 value`` under the installation's secret).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import uuid
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from proxy import identity
from proxy.models import Account
from proxy.services.client_api_keys import client_api_key_create
from tests.proxy.conftest import make_pool_account, post_responses

CLI = json.loads(
    (Path(__file__).parent / "fixtures" / "codex_cli_0.171.0_requests.json").read_text()
)
CLI_HEADERS = {name: value for name, value in CLI["http"]["headers"]}
CLI_BODY = CLI["http"]["body"]
CLI_METADATA = CLI_BODY["client_metadata"]
CLI_TURN_METADATA = json.loads(CLI_METADATA["x-codex-turn-metadata"])
# Every id of the client's that could link two accounts, as the CLI sent it.
CLI_IDS = {
    "installation": CLI_METADATA["x-codex-installation-id"],
    "session": CLI_METADATA["session_id"],
    "thread": CLI_METADATA["thread_id"],
    "turn": CLI_METADATA["turn_id"],
    "window": CLI_METADATA["x-codex-window-id"],
    "context window": CLI_TURN_METADATA["context_window_id"],
    "request": CLI_HEADERS["x-client-request-id"],
}
# The CLI's headers that are the client's own transport (the proxy sends its fingerprint's).
CLIENT_ONLY_HEADERS = {"accept", "content-type", "originator", "user-agent", "accept-encoding"}


def _pseudonym(*parts: str) -> bytes:
    message = "\0".join(parts).encode()
    return hmac.new(identity.identity_secret(), message, hashlib.sha256).digest()


def _wi(domain: str, account_id: str, key_id: str, value: str) -> str:
    """The spec's formula with the client key beside the account (docs/departures.md)."""
    digest = _pseudonym(domain, account_id, key_id, value)
    return "wi_" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _cr(account_id: str, key_id: str, value: str) -> str:
    digest = _pseudonym("client-request-id", account_id, key_id, value)
    return "cr_" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _installation(account_id: str) -> str:
    """The account's alone: the same for every key."""
    return str(uuid.UUID(bytes=_pseudonym("installation-id", account_id, "")[:16], version=4))


def _cli_headers() -> dict[str, str]:
    return {name: value for name, value in CLI_HEADERS.items() if name not in CLIENT_ONLY_HEADERS}


def _everything_sent(sent) -> str:
    """Every header value and the whole body (the frame as sent, for a WebSocket message)."""
    parts = [value for _, value in sent.headers]
    parts.append(json.dumps(sent.extra.get("frame")) if "frame" in sent.extra else "")
    parts.append(sent.body.decode())
    return "\n".join(parts)


def _assert_no_client_id(sent) -> None:
    text = _everything_sent(sent)
    leaked = {name: value for name, value in CLI_IDS.items() if value in text}
    assert leaked == {}


def _sent_body(sent) -> dict:
    return sent.extra["frame"] if "frame" in sent.extra else sent.json()


def _wire_ids(sent) -> dict:
    """Every id value of an upstream request of the CLI's body (HTTP), by where it is."""
    metadata = sent.json()["client_metadata"]
    turn_metadata = json.loads(metadata["x-codex-turn-metadata"])
    return {
        **{
            header: sent.header(header)
            for header in (
                "x-codex-installation-id",
                "session-id",
                "thread-id",
                "x-codex-window-id",
                "x-client-request-id",
            )
        },
        "prompt_cache_key": sent.json()["prompt_cache_key"],
        **{f"metadata {key}": metadata[key] for key in CLI_METADATA if "turn-metadata" not in key},
        **{
            f"turn metadata {key}": turn_metadata[key]
            for key in ("installation_id", "turn_id", "context_window_id")
        },
    }


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
def test_a_codex_cli_request_reaches_the_account_with_its_ids_only(
    proxy, upstream, client_key, transport
):
    account = make_pool_account("tok-a")
    body = {**CLI_BODY, "use_websocket": transport == "websocket"}

    response = post_responses(proxy, client_key, body, **_cli_headers())

    assert response.status_code == 200 and "response.completed" in response.text
    [sent] = upstream.responses_requests()
    assert sent.method == ("WS" if transport == "websocket" else "POST")
    _assert_no_client_id(sent)
    a, k = account.id, client_key.id
    session, window = CLI_IDS["session"], CLI_IDS["window"]
    turn, thread = CLI_IDS["turn"], CLI_IDS["thread"]
    # Headers: the account's installation id and request id, the ids' pseudonyms.
    assert sent.header("x-codex-installation-id") == _installation(a)
    assert sent.header("x-client-request-id") == _cr(a, k, CLI_IDS["request"])
    assert sent.header("session-id") == _wi("session-id", a, k, session)
    assert sent.header("thread-id") == _wi("thread-id", a, k, thread)
    assert sent.header("x-codex-window-id") == _wi("window-id", a, k, window)
    assert sent.header("x-codex-beta-features") == "remote_compaction_v2"
    # Body: the client's keys in the client's order; ids replaced, nothing else changed.
    upstream_body = _sent_body(sent)
    assert upstream_body["prompt_cache_key"] == _wi(
        "prompt-cache-key", a, k, CLI_BODY["prompt_cache_key"]
    )
    metadata = upstream_body["client_metadata"]
    expected_keys = list(CLI_METADATA) + ["x-client-request-id"]
    if transport == "websocket":
        expected_keys.append("x-codex-ws-stream-request-start-ms")
    assert list(metadata) == expected_keys
    assert {key: metadata[key] for key in expected_keys[:-1] if key != "x-codex-turn-metadata"} == {
        "session_id": _wi("session-id", a, k, session),
        "root_turn_id": _wi("turn-id", a, k, turn),
        "x-codex-installation-id": _installation(a),
        "thread_id": _wi("thread-id", a, k, thread),
        "x-codex-window-id": _wi("window-id", a, k, window),
        "turn_id": _wi("turn-id", a, k, turn),
        **(
            {"x-client-request-id": _cr(a, k, CLI_IDS["request"])}
            if transport == "websocket"
            else {}
        ),
    }
    assert metadata["x-client-request-id"] == sent.header("x-client-request-id")
    # Turn metadata: the same scoped text in the header and in client_metadata, each id the
    # value sent beside it, every other field as the CLI wrote it.
    assert metadata["x-codex-turn-metadata"] == sent.header("x-codex-turn-metadata")
    turn_metadata = json.loads(metadata["x-codex-turn-metadata"])
    assert list(turn_metadata) == list(CLI_TURN_METADATA)
    assert turn_metadata == {
        **CLI_TURN_METADATA,
        "installation_id": _installation(a),
        "session_id": sent.header("session-id"),
        "thread_id": sent.header("thread-id"),
        "turn_id": metadata["turn_id"],
        "root_turn_id": metadata["turn_id"],
        "window_id": sent.header("x-codex-window-id"),
        "context_window_id": _wi("window-id", a, k, CLI_TURN_METADATA["context_window_id"]),
    }
    assert {key: upstream_body[key] for key in ("model", "input", "tools", "include", "store")} == {
        key: CLI_BODY[key] for key in ("model", "input", "tools", "include", "store")
    }


def test_the_same_client_ids_are_one_value_per_account_and_another_on_the_next(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    body = {**CLI_BODY, "stream": False, "use_websocket": False}

    for _ in range(2):
        assert post_responses(proxy, client_key, body, **_cli_headers()).status_code == 200
    # The conversation stays on its account; it moves only when that account cannot serve.
    first_token, second_token = upstream.tokens_called()
    assert first_token == second_token
    Account.objects.filter(access_token=first_token).update(status="disabled")
    assert post_responses(proxy, client_key, body, **_cli_headers()).status_code == 200

    first, again, elsewhere = upstream.responses_requests()
    assert elsewhere.header("authorization") != first.header("authorization")

    on_a, again_on_a, on_b = _wire_ids(first), _wire_ids(again), _wire_ids(elsewhere)
    assert on_a == again_on_a
    assert {name for name in on_a if on_a[name] == on_b[name]} == set()
    for sent in (first, again, elsewhere):
        _assert_no_client_id(sent)


def test_a_compact_of_a_codex_cli_request_carries_the_accounts_ids(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    a, k = account.id, client_key.id

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        data=json.dumps(CLI_BODY),
        headers={"Authorization": f"Bearer {client_key.key}", **_cli_headers()},
        timeout=30,
    )

    assert response.status_code == 200
    [sent] = upstream.server.requests_to("/codex/responses/compact")
    _assert_no_client_id(sent)
    body = sent.json()
    assert "stream" not in body
    assert body["prompt_cache_key"] == _wi("prompt-cache-key", a, k, CLI_BODY["prompt_cache_key"])
    metadata = body["client_metadata"]
    # The original's compact_upstream_request: the client's keys kept in place, the account's
    # installation id, session, thread, request, turn and window ids set.
    assert list(metadata) == [*CLI_METADATA, "x-client-request-id"]
    assert metadata["x-codex-installation-id"] == sent.header("x-codex-installation-id")
    assert metadata["x-codex-installation-id"] == _installation(a)
    assert (
        metadata["session_id"]
        == sent.header("session-id")
        == _wi("session-id", a, k, CLI_IDS["session"])
    )
    assert metadata["thread_id"] == sent.header("thread-id")
    assert metadata["turn_id"] == _wi("turn-id", a, k, CLI_IDS["turn"])
    assert metadata["x-codex-window-id"] == sent.header("x-codex-window-id")
    assert metadata["x-client-request-id"] == sent.header("x-client-request-id")
    assert metadata["x-client-request-id"] == _cr(a, k, CLI_IDS["request"])
    assert json.loads(metadata["x-codex-turn-metadata"])["installation_id"] == _installation(a)
    assert sent.header("x-codex-turn-metadata") is None  # not a compact header (spec §2.3)


def test_compact_without_client_metadata_gets_one_with_the_accounts_ids(
    proxy, upstream, client_key
):
    account = make_pool_account("tok-a")

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        data=json.dumps({"model": "gpt-5.4", "input": [], "session_id": "s-1"}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 200
    [sent] = upstream.server.requests_to("/codex/responses/compact")
    assert list(sent.json()["client_metadata"].items()) == [
        ("x-codex-installation-id", _installation(account.id)),
        ("session_id", _wi("session-id", account.id, client_key.id, "s-1")),
        ("x-client-request-id", sent.header("x-client-request-id")),
    ]


def test_the_websocket_payload_keeps_the_clients_values_and_adds_the_accounts(
    proxy, upstream, client_key
):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # codex_backend_client_websocket_should_forward_headers_and_preserve_payload_fields — the
    # same request and context: the headers it asserts (no thread-id without a thread id), the
    # client's client_metadata entries kept as they were, non-strings included. Its transport
    # adds nothing to the payload; the account's values appended to client_metadata and the
    # scoped prompt_cache_key here are the identity rewrite (proxy/domain/wire_identity.py)
    # that runs before the transport. (Not its older
    # ..._forward_security_chain_headers_and_payload_fields, which expects a thread-id header
    # and the session id as prompt_cache_key.)
    account = make_pool_account("tok-a")
    a, k = account.id, client_key.id

    post_responses(
        proxy,
        client_key,
        {
            "model": "gpt-5.4",
            "stream": False,
            "prompt_cache_key": "client-thread",
            "client_metadata": {
                "safe": "yes",
                "x-openai-subagent": "review",
                "ignored_non_string": 42,
            },
            "turnState": "turn-state",
            "turnMetadata": '{"thread_source":"subagent"}',
            "betaFeatures": "feature-a",
            "includeTimingMetrics": "true",
            "version": "26.318.11754",
            "codexWindowId": "cw-1",
            "parentThreadId": "parent-456",
        },
        **{"session-id": "session-1"},
    )

    [sent] = upstream.websocket_requests()
    frame = sent.extra["frame"]
    assert frame["prompt_cache_key"] == _wi("prompt-cache-key", a, k, "client-thread")
    metadata = dict(frame["client_metadata"])
    assert metadata.pop("x-codex-ws-stream-request-start-ms").isdigit()
    assert list(metadata.items()) == [
        ("safe", "yes"),
        ("x-openai-subagent", "review"),
        ("ignored_non_string", 42),
        ("x-codex-installation-id", _installation(a)),
        ("session_id", _wi("session-id", a, k, "session-1")),
        ("x-client-request-id", sent.header("x-client-request-id")),
        ("x-codex-window-id", _wi("window-id", a, k, "cw-1")),
        ("x-codex-turn-metadata", '{"thread_source":"subagent"}'),
        ("x-codex-parent-thread-id", _wi("parent-thread-id", a, k, "parent-456")),
    ]
    assert {
        header: sent.header(header)
        for header in (
            "x-codex-installation-id",
            "x-openai-internal-codex-residency",
            "x-codex-turn-state",
            "x-codex-turn-metadata",
            "x-codex-beta-features",
            "x-responsesapi-include-timing-metrics",
            "version",
            "x-codex-parent-thread-id",
            "x-openai-subagent",
            "session-id",
        )
    } == {
        "x-codex-installation-id": _installation(a),
        "x-openai-internal-codex-residency": "us",
        "x-codex-turn-state": "turn-state",
        "x-codex-turn-metadata": '{"thread_source":"subagent"}',
        "x-codex-beta-features": "feature-a",
        "x-responsesapi-include-timing-metrics": "true",
        "version": "26.318.11754",
        "x-codex-parent-thread-id": _wi("parent-thread-id", a, k, "parent-456"),
        "x-openai-subagent": "review",
        "session-id": _wi("session-id", a, k, "session-1"),
    }
    names = {name.lower() for name, _ in sent.headers}
    assert names.isdisjoint({"thread-id", "content-type", "accept", "session_id"})


@pytest.mark.parametrize(
    ("subagent", "header"),
    [("memory_consolidation", "memory_consolidation"), (" review ", "review"), ("other", None)],
)
def test_a_subagent_in_client_metadata_becomes_the_upstream_header(
    proxy, upstream, client_key, subagent, header
):
    make_pool_account("tok-a")

    post_responses(
        proxy,
        client_key,
        {
            "model": "gpt-5.4",
            "stream": False,
            "use_websocket": False,
            "client_metadata": {"x-openai-subagent": subagent},
        },
    )

    [sent] = upstream.responses_requests()
    assert sent.header("x-openai-subagent") == header
    assert sent.json()["client_metadata"]["x-openai-subagent"] == subagent  # the body as sent


def test_an_id_the_client_left_blank_is_not_sent_at_all(proxy, upstream, client_key):
    # The Codex CLI's prewarm request carries "turn_id": "" (the original drops an identity
    # field it has no value for).
    make_pool_account("tok-a")
    [prewarm, _] = CLI["websocket"]["frames"]
    body = {key: value for key, value in prewarm.items() if key != "type"}

    post_responses(proxy, client_key, {**body, "stream": False, "use_websocket": False})

    [sent] = upstream.responses_requests()
    metadata = sent.json()["client_metadata"]
    assert "turn_id" not in metadata and sent.header("x-codex-turn-id") is None
    # The client's own start stamp is not an id: it stays; its ids do not.
    assert (
        metadata["x-codex-ws-stream-request-start-ms"]
        == prewarm["client_metadata"]["x-codex-ws-stream-request-start-ms"]
    )
    assert json.loads(metadata["x-codex-turn-metadata"])["turn_id"] == ""
    text = _everything_sent(sent)
    assert prewarm["client_metadata"]["x-codex-installation-id"] not in text
    assert prewarm["client_metadata"]["session_id"] not in text


def test_turn_metadata_without_ids_or_not_json_is_forwarded_as_it_is(proxy, upstream, client_key):
    make_pool_account("tok-a")
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "use_websocket": False,
        "turnMetadata": "not json, but session_id-like text",
    }

    post_responses(proxy, client_key, {**body, "client_metadata": {}})
    post_responses(
        proxy,
        client_key,
        {**body, "client_metadata": {"x-codex-turn-metadata": '{ "sandbox" : "seccomp" }'}},
    )

    inserted, own = upstream.responses_requests()
    for sent in (inserted, own):
        assert sent.header("x-codex-turn-metadata") == "not json, but session_id-like text"
        assert sent.json()["turnMetadata"] == "not json, but session_id-like text"
    # The request's turn metadata is inserted as the original inserts it; the metadata's own
    # (a WebSocket client's per request) is kept.
    assert inserted.json()["client_metadata"]["x-codex-turn-metadata"] == (
        "not json, but session_id-like text"
    )
    assert own.json()["client_metadata"]["x-codex-turn-metadata"] == '{ "sandbox" : "seccomp" }'


def test_no_client_metadata_stays_none_over_http(proxy, upstream, client_key):
    make_pool_account("tok-a")

    post_responses(
        proxy,
        client_key,
        {"model": "gpt-5.4", "stream": False, "use_websocket": False, "session_id": "s-1"},
    )

    [sent] = upstream.responses_requests()
    body = sent.json()
    assert "client_metadata" not in body
    assert re.fullmatch(r"wi_[A-Za-z0-9_-]{43}", body["session_id"])


# ----------------------------------------------------------------------------- across client keys


@pytest.fixture
def key_b(transactional_db):
    return client_api_key_create(name="key b", now=timezone.now())


def test_two_keys_sending_the_same_ids_to_one_account_send_different_values(
    proxy, upstream, client_key, key_b
):
    """Two client keys (two customers of the pool) running the same Codex CLI session, or
    sending the same prompt_cache_key, on one account: identical pseudonyms would put them in
    one upstream prompt cache and session — a side channel between keys. Each key's values are
    its own (stable for it); only the installation id, the account's, is shared."""
    account = make_pool_account("tok-a")
    body = {**CLI_BODY, "stream": False, "use_websocket": False}

    for key in (client_key, key_b, client_key):
        assert post_responses(proxy, key, body, **_cli_headers()).status_code == 200

    of_a, of_b, of_a_again = (_wire_ids(sent) for sent in upstream.responses_requests())
    assert of_a == of_a_again
    assert {name for name in of_a if of_a[name] == of_b[name]} == {
        "x-codex-installation-id",
        "metadata x-codex-installation-id",
        "turn metadata installation_id",
    }
    assert of_b["prompt_cache_key"] == _wi(
        "prompt-cache-key", account.id, key_b.id, CLI_BODY["prompt_cache_key"]
    )
    assert of_b["x-client-request-id"] == _cr(account.id, key_b.id, CLI_IDS["request"])
    assert of_a["x-codex-installation-id"] == _installation(account.id)


def test_chat_user_becomes_a_prompt_cache_key_of_the_key_and_account(
    proxy, upstream, client_key, key_b
):
    # The legacy rule (spec §1.9): chat's `user` is the upstream prompt_cache_key.
    account = make_pool_account("tok-a")

    for key in (client_key, key_b):
        answer = requests.post(
            f"{proxy.url}/v1/chat/completions",
            json={
                "model": "gpt-5.4",
                "messages": [{"role": "user", "content": "hi"}],
                "user": "end-user-7",
            },
            headers={"Authorization": f"Bearer {key.key}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

    sent = [_sent_body(request) for request in upstream.responses_requests()]
    assert [body["prompt_cache_key"] for body in sent] == [
        _wi("prompt-cache-key", account.id, client_key.id, "end-user-7"),
        _wi("prompt-cache-key", account.id, key_b.id, "end-user-7"),
    ]
    assert all("end-user-7" not in _everything_sent(request) for request in upstream.requests)


# ----------------------------------------------------------------------------- other identifiers


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
def test_end_user_ids_and_turn_metadata_objects_reach_the_account_scoped(
    proxy, upstream, client_key, transport
):
    """OpenAI's end-user identifiers, and turn metadata sent as a JSON object (not the CLI's
    string) or with camelCase ids, are the client's identity too; ``metadata`` (the client's
    own key-value pairs, which OpenAI stores with the response) and the input's text are not
    touched."""
    account = make_pool_account("tok-a")
    a, k = account.id, client_key.id
    user_text = "my session_id is sess-77 and my user is alice@example.com"
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "use_websocket": transport == "websocket",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": user_text}]}],
        "user": "alice@example.com",
        "safety_identifier": "hashed-alice",
        "metadata": {"user": "alice@example.com", "session_id": "sess-77"},
        "session_id": "sess-77",
        "turnMetadata": {
            "sessionId": "sess-77",
            "threadId": "thread-9",
            "turnId": "turn-3",
            "installationId": "inst-local",
            "sandbox": "seccomp",
            "window_number": 0,
        },
        "client_metadata": {
            "x-codex-turn-metadata": {"session_id": "sess-77", "installation_id": "inst-local"},
        },
    }

    answer = post_responses(proxy, client_key, body)

    assert answer.status_code == 200, answer.text
    [sent] = upstream.responses_requests()
    upstream_body = _sent_body(sent)
    assert upstream_body["user"] == _wi("user", a, k, "alice@example.com")
    assert upstream_body["safety_identifier"] == _wi("safety-identifier", a, k, "hashed-alice")
    session = _wi("session-id", a, k, "sess-77")
    assert upstream_body["session_id"] == session
    assert upstream_body["turnMetadata"] == {
        "sessionId": session,
        "threadId": _wi("thread-id", a, k, "thread-9"),
        "turnId": _wi("turn-id", a, k, "turn-3"),
        "installationId": _installation(a),
        "sandbox": "seccomp",
        "window_number": 0,
    }
    assert upstream_body["client_metadata"]["x-codex-turn-metadata"] == {
        "session_id": session,
        "installation_id": _installation(a),
    }
    # Left alone: the client's metadata and its text.
    assert upstream_body["metadata"] == body["metadata"]
    assert upstream_body["input"] == body["input"]
    outside_what_is_left_alone = _everything_sent(sent).replace(json.dumps(body["metadata"]), "")
    for identifier in ("hashed-alice", "thread-9", "turn-3", "inst-local"):
        assert identifier not in outside_what_is_left_alone


def test_camel_case_ids_inside_turn_metadata_text_are_scoped_like_snake_case(
    proxy, upstream, client_key
):
    account = make_pool_account("tok-a")
    a, k = account.id, client_key.id
    turn_metadata = json.dumps({"sessionId": "s-1", "threadId": "t-1", "turnId": "u-1"})

    post_responses(
        proxy,
        client_key,
        {"model": "gpt-5.4", "stream": False, "use_websocket": False, "client_metadata": {}},
        **{"x-codex-turn-metadata": turn_metadata},
    )

    [sent] = upstream.responses_requests()
    scoped = {
        "sessionId": _wi("session-id", a, k, "s-1"),
        "threadId": _wi("thread-id", a, k, "t-1"),
        "turnId": _wi("turn-id", a, k, "u-1"),
    }
    assert json.loads(sent.header("x-codex-turn-metadata")) == scoped
    assert json.loads(sent.json()["client_metadata"]["x-codex-turn-metadata"]) == scoped
