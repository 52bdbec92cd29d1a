"""What the ledger keeps of an upstream's error answer (issue 38 item 4): its status in the ops
row's ``upstream_status_code`` column and the start of its body in ``metadata_json``
(``upstreamBody``; the seed has no column for it), secrets masked before the row is written,
and the console's page of the row shows both."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.admin.utils import quote
from django.test import Client

from proxy.services.admin_users import admin_user_create_default
from telemetry.models import OpsErrorLog
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses, reset_rotation

ACCESS_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c2VyLXgifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
CLIENT_KEY_ECHO = "sk_" + "Q" * 43


def _non_stream(proxy, key):
    body = {"model": "gpt-5.4", "stream": False, "input": [], "use_websocket": False}
    return post_responses(proxy, key, body)


def _page(error: OpsErrorLog) -> str:
    client = Client()
    client.force_login(admin_user_create_default(password="x" * 16, now=datetime.now(UTC)))
    return client.get(f"/admin/telemetry/opserrorlog/{quote(error.pk)}/change/").content.decode()


def test_a_4xx_answer_is_recorded_with_its_status_and_masked_body(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            kind="status",
            status=400,
            body={
                "error": {
                    "message": f"Invalid request from key {CLIENT_KEY_ECHO}",
                    "access_token": ACCESS_TOKEN,
                    "param": "input",
                }
            },
        ),
    )

    response = _non_stream(proxy, client_key)

    assert response.status_code == 400
    proxy.drain()
    [error] = OpsErrorLog.objects.all()
    assert (error.status_code, error.upstream_status_code) == (400, 400)
    body = error.metadata_json["upstreamBody"]
    assert body == (
        '{"error": {"message": "Invalid request from key [masked]", '
        '"access_token": "[masked]", "param": "input"}}'
    )
    assert error.metadata_json["upstreamBodyTruncated"] is False
    stored = str(error.metadata_json) + error.message
    assert ACCESS_TOKEN not in stored and CLIENT_KEY_ECHO not in stored
    page = _page(error)
    assert "upstream status 400" in page.replace("</th><td>", " ")
    assert "&quot;access_token&quot;: &quot;[masked]&quot;" in page
    assert ACCESS_TOKEN not in page


def test_a_5xx_attempt_that_moved_on_keeps_its_excerpt(proxy, upstream, client_key):
    reset_rotation()
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    page = "<html><body>" + "overloaded " * 200 + f"session={ACCESS_TOKEN}</body></html>"
    upstream.program("tok-a", *[Reply(kind="status", status=503, body=page)] * 3)

    response = _non_stream(proxy, client_key)

    assert response.status_code == 200
    proxy.drain()
    [error] = OpsErrorLog.objects.all()
    assert (error.failure_class, error.upstream_status_code) == ("upstream_unavailable", 503)
    excerpt = error.metadata_json["upstreamBody"]
    assert excerpt.startswith("<html><body>overloaded overloaded")
    assert len(excerpt) == 1000 and error.metadata_json["upstreamBodyTruncated"] is True
    assert ACCESS_TOKEN not in str(error.metadata_json)


def test_a_failure_without_an_answer_records_no_body(proxy, upstream, client_key):
    reset_rotation()
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    upstream.program("tok-a", Reply(kind="drop"), Reply(kind="drop"))

    assert _non_stream(proxy, client_key).status_code == 200
    proxy.drain()

    for error in OpsErrorLog.objects.all():
        assert error.upstream_status_code is None
        assert "upstreamBody" not in error.metadata_json


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"Bearer {ACCESS_TOKEN}", "Bearer [masked]"),
        (
            '{"refresh_token": "rt_abc", "input_tokens": 12}',
            '{"refresh_token": "[masked]", "input_tokens": 12}',
        ),
        ("cookie: cf_clearance=AbC123; path=/", "cookie: [masked]; path=/"),
        ("admin-" + "a" * 64, "[masked]"),
        ("opaque " + "Z" * 48, "opaque [masked]"),
        (
            "model gpt-5.4-mini at chatgpt.com/backend-api, req_0123456789abcdef0123456789abcdef",
            "model gpt-5.4-mini at chatgpt.com/backend-api, req_0123456789abcdef0123456789abcdef",
        ),
    ],
)
def test_what_counts_as_a_secret(text, masked):
    from common.secret_masking import mask_secrets

    assert mask_secrets(text) == masked


def test_an_excerpt_never_ends_in_part_of_a_secret():
    from common.secret_masking import masked_excerpt

    # Read 4 × 10 characters: the cut runs through the opaque token, whose 37 characters left
    # would be too short to be recognised as one.
    assert masked_excerpt("ab " + "Z" * 60, limit=10) == ("ab ", True)
    assert masked_excerpt("short words", limit=10) == ("short word", True)
    assert masked_excerpt("short", limit=10) == ("short", False)
