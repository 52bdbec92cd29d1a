"""Findings 6, 9, 10 on /v1: the key is checked before the body is read, the Host is checked,
a CRLF bound for an upstream header or JSON nested too deep is a 400 in the OpenAI envelope."""

from __future__ import annotations

import http.client
import json

import pytest
import requests

from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses

FIFTEEN_MIB = 15 * 1024 * 1024


def _raw_exchange(port: int, path: str, length: int, *, body_part: bytes = b"", **headers):
    """POST ``path`` declaring ``length`` body bytes but sending only ``body_part``, and read the
    answer: (status, headers, body). The rest of the declared body is never sent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(length))
        for name, value in headers.items():
            connection.putheader(name.replace("_", "-"), value)
        connection.endheaders(body_part)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_an_unauthenticated_15_mib_post_is_answered_401_before_its_body_is_read(proxy, upstream):
    # Only the headers and the first bytes of a 15 MiB body are ever sent.
    status, _, body = _raw_exchange(
        proxy.port, "/v1/responses", FIFTEEN_MIB, body_part=b'{"model": "'
    )

    assert status == 401
    assert json.loads(body) == {
        "error": {
            "message": "Missing client API key",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    assert upstream.responses_requests() == []


def test_a_wrong_key_on_a_big_chat_post_is_refused_before_the_body_too(proxy, upstream):
    status, _, body = _raw_exchange(
        proxy.port, "/v1/chat/completions", FIFTEEN_MIB, Authorization="Bearer sk_guess"
    )

    assert status == 401
    assert json.loads(body)["error"]["code"] == "invalid_api_key"


def test_a_declared_body_over_16_mib_is_413_even_with_a_valid_key(proxy, client_key):
    status, _, body = _raw_exchange(
        proxy.port,
        "/v1/responses",
        17 * 1024 * 1024,
        Authorization=f"Bearer {client_key.key}",
    )

    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_a_foreign_host_header_is_refused_on_v1(proxy, upstream, client_key):
    make_pool_account("tok-host")

    response = requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": [], "stream": False}),
        headers={
            "Authorization": f"Bearer {client_key.key}",
            "Host": "evil.example",
            "x-request-id": "host-probe",
        },
        timeout=30,
    )

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "Invalid Host header",
            "type": "invalid_request_error",
            "code": "invalid_host",
        }
    }
    assert response.headers["x-request-id"] == "host-probe"
    assert upstream.responses_requests() == []
    models = requests.get(
        f"{proxy.url}/v1/models",
        headers={"Authorization": f"Bearer {client_key.key}", "Host": "evil.example"},
        timeout=30,
    )
    assert models.status_code == 400


@pytest.mark.parametrize("field", ["turnState", "turnMetadata", "betaFeatures", "version"])
def test_a_crlf_bound_for_an_upstream_header_is_a_400(proxy, upstream, client_key, field):
    make_pool_account("tok-crlf")
    body = {"model": "gpt-5.4", "input": [], field: "ok\r\nX-Injected: yes"}

    response = post_responses(proxy, client_key, body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_header_value"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "\r" not in response.text
    assert upstream.responses_requests() == []


def test_a_header_value_of_more_than_8_kib_is_a_400(proxy, upstream, client_key):
    make_pool_account("tok-long")

    response = post_responses(
        proxy, client_key, {"model": "gpt-5.4", "input": [], "turnState": "a" * 8193}
    )

    assert response.status_code == 400
    assert upstream.responses_requests() == []


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/chat/completions"])
def test_json_nested_too_deep_is_a_400_not_a_traceback(proxy, upstream, client_key, route):
    response = requests.post(
        f"{proxy.url}{route}",
        data=b"[" * 200_000 + b"]" * 200_000,
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in response.text
    assert upstream.responses_requests() == []


def test_a_deep_but_parseable_body_is_never_a_500(proxy, upstream, client_key):
    """Nested just under the parser's limit, it parses; whatever then walks it recursively
    (the schema translation) must still not turn it into a 500."""
    make_pool_account("tok-deep")
    upstream.program("tok-deep", Reply())
    nested: object = "leaf"
    for _ in range(450):
        nested = {"type": "object", "properties": {"x": nested}}
    body = {
        "model": "gpt-5.4",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": nested}},
    }

    response = requests.post(
        f"{proxy.url}/v1/chat/completions",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code != 500, response.text
    assert response.status_code in (200, 400)
    assert response.headers["content-type"].startswith(("application/json", "text/event-stream"))
