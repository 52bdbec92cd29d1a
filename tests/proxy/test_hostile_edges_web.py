"""Hostile text and cross-site requests against the real web process (``config.run web``, as
``make run`` starts it): a lone surrogate (``"\\ud800"``, which JSON can spell and no UTF-8 can
carry) anywhere a client can put it is a 400 in the route's envelope — never a 500 — and
nothing of it reaches the upstream or the database; another site cannot log the admin out; a
WebSocket upgrade to an unknown path is refused without a traceback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import requests
from django.utils import timezone

from proxy.models import Account, ClientApiKey
from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.sessions import admin_session_login
from telemetry.models import UsageRecord
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.conftest import make_pool_account
from tests.web_process import WebProcess

pytestmark = pytest.mark.subprocess

SURROGATE = '"\\ud800"'  # the JSON text of a lone surrogate
UNENCODABLE_MESSAGE = "Request JSON holds text that is not valid Unicode (a lone surrogate escape)"
COOKIE = "cpr_admin_session"


@pytest.fixture
def admin(transactional_db):
    return admin_user_create_default(password="correct horse battery staple", now=timezone.now())


@pytest.fixture
def web(upstream, admin, tmp_path):
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    process = WebProcess(tmp_path, CODEX_UPSTREAM_BASE=upstream.url)
    yield process
    process.stop()


def _with_surrogate(template: str) -> bytes:
    return template.replace("SURROGATE", SURROGATE).encode()


V1_CASES = [
    ("/v1/responses", '{"model": "gpt-5.4", "input": SURROGATE, "stream": false}'),
    ("/v1/responses", '{"model": "gpt-5.4", "instructions": SURROGATE, "input": []}'),
    ("/v1/responses", '{"model": "gpt-5.4", "input": [{"role": "user", "content": SURROGATE}]}'),
    ("/v1/responses", '{"model": SURROGATE, "input": []}'),
    ("/v1/responses", '{"model": "gpt-5.4", "input": [], "metadata": {SURROGATE: "x"}}'),
    ("/v1/responses/compact", '{"model": "gpt-5.4", "input": SURROGATE}'),
    ("/v1/responses/review", '{"model": "gpt-5.4", "input": SURROGATE}'),
    (
        "/v1/chat/completions",
        '{"model": "gpt-5.4", "messages": [{"role": "user", "content": SURROGATE}]}',
    ),
    (
        "/v1/chat/completions",
        '{"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}], "user": SURROGATE}',
    ),
    # A 19-digit run sends the body to json.loads (orjson would read it as a float): the
    # surrogate is found there too.
    ("/v1/responses", '{"model": "gpt-5.4", "input": SURROGATE, "n": 1234567890123456789}'),
]


@pytest.mark.parametrize(("path", "body"), V1_CASES)
def test_a_lone_surrogate_in_a_v1_body_is_a_400_and_reaches_nothing(
    web, upstream, client_key, path, body
):
    make_pool_account("tok-a")

    response = requests.post(
        f"{web.url}{path}",
        data=_with_surrogate(body),
        headers={"Authorization": f"Bearer {client_key.key}", "Content-Type": "application/json"},
        timeout=30,
    )

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": UNENCODABLE_MESSAGE,
            "type": "invalid_request_error",
            "code": "invalid_request",
        }
    }
    assert upstream.responses_requests() == []
    assert UsageRecord.objects.count() == 0
    assert "Traceback" not in web.log()


def test_a_lone_surrogate_in_a_websocket_frame_is_an_error_frame_and_the_socket_stays_open(
    web, upstream, client_key
):
    make_pool_account("tok-a")
    url = web.url.replace("http://", "ws://") + "/v1/responses"
    auth = {"Authorization": f"Bearer {client_key.key}"}
    hostile = _with_surrogate(
        '{"type": "response.create", "model": "gpt-5.4", "input": SURROGATE}'
    ).decode()
    served = json.dumps({"type": "response.create", "model": "gpt-5.4", "input": []})

    async def scenario() -> tuple[dict, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers=auth) as socket,
        ):
            await socket.send_str(hostile)
            refused = json.loads((await socket.receive(timeout=30)).data)
            await socket.send_str(served)
            while True:
                event = json.loads((await socket.receive(timeout=30)).data)
                if event["type"] in ("response.completed", "response.failed", "error"):
                    return refused, event["type"]

    refused, then = asyncio.run(scenario())

    assert refused == {
        "type": "error",
        "status": 400,
        "error": {
            "message": UNENCODABLE_MESSAGE,
            "type": "invalid_request_error",
            "code": "invalid_request",
        },
    }
    assert then == "response.completed"
    assert len(upstream.responses_requests()) == 1  # only the second frame's
    assert "Traceback" not in web.log()


def _admin_headers(web: WebProcess, token: str, **extra: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={token}", "Origin": web.url, **extra}


def test_a_lone_surrogate_in_an_imported_accounts_label_makes_that_entry_invalid(web, admin):
    token, _ = admin_session_login(user=admin, now=timezone.now())
    good = access_token_for(Identity("org-good", "user-good", "plus"), expires_in=3600)
    hostile = access_token_for(Identity("org-bad", "user-bad", "plus"), expires_in=3600)
    body = f'[{{"token": "{good}", "label": "fine"}}, {{"token": "{hostile}", "label": SURROGATE}}]'

    response = requests.post(
        f"{web.url}/api/admin/accounts/import",
        data=_with_surrogate(body),
        headers={**_admin_headers(web, token), "Content-Type": "application/json"},
        timeout=30,
    )

    assert response.status_code == 200, response.text
    report = response.json()["data"]
    assert (report["imported"], report["invalid"]) == (1, 1)
    [invalid] = [item for item in report["results"] if item["outcome"] == "invalid"]
    assert (
        invalid["reason"] == "the label contains text that is not valid Unicode (a lone surrogate)"
    )
    assert list(Account.objects.values_list("label", flat=True)) == ["fine"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/admin/keys", '{"name": SURROGATE}'),
        ("/api/admin/keys", '{"name": "k", SURROGATE: 1}'),
        ("/api/admin/login", '{"username": SURROGATE, "password": "whatever it is"}'),
    ],
)
def test_a_lone_surrogate_in_an_admin_api_body_is_40001(web, admin, path, body):
    token, _ = admin_session_login(user=admin, now=timezone.now())

    response = requests.post(
        f"{web.url}{path}",
        data=_with_surrogate(body),
        headers={**_admin_headers(web, token), "Content-Type": "application/json"},
        timeout=30,
    )

    assert response.status_code == 400, response.text
    assert response.json()["code"] == 40001
    assert "not valid Unicode (a lone surrogate)" in response.json()["message"]
    assert ClientApiKey.objects.count() == 0
    assert "Traceback" not in web.log()


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},
    ],
    ids=["other-origin", "sec-fetch-cross-site", "opaque-origin"],
)
def test_another_site_cannot_log_the_admin_out(web, admin, headers):
    token, _ = admin_session_login(user=admin, now=timezone.now())
    cookie = {"Cookie": f"{COOKIE}={token}"}

    refused = requests.post(
        f"{web.url}/api/admin/logout", headers={**cookie, **headers}, timeout=10
    )
    status = requests.get(f"{web.url}/api/admin/auth/status", headers=cookie, timeout=10)

    assert refused.status_code == 403
    assert refused.json()["code"] == 40301
    assert "set-cookie" not in refused.headers  # the cookie is not cleared
    assert status.json()["data"] == {"authenticated": True}  # the session lives on


def test_the_admins_own_page_still_logs_out(web, admin):
    token, _ = admin_session_login(user=admin, now=timezone.now())
    cookie = {"Cookie": f"{COOKIE}={token}"}

    answer = requests.post(
        f"{web.url}/api/admin/logout",
        headers={**cookie, "Origin": web.url, "Sec-Fetch-Site": "same-origin"},
        timeout=10,
    )
    status = requests.get(f"{web.url}/api/admin/auth/status", headers=cookie, timeout=10)

    assert answer.status_code == 200
    assert status.json()["data"] == {"authenticated": False}


@pytest.mark.parametrize("path", ["/v1/nope", "/", "/api/admin/logout", "/v1/responses/x"])
def test_a_websocket_upgrade_to_an_unknown_path_is_refused_without_a_traceback(web, path):
    url = web.url.replace("http://", "ws://") + path

    async def scenario() -> int:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(url)
            return refused.value.status

    statuses = [asyncio.run(scenario()) for _ in range(5)]

    assert statuses == [404] * 5
    log = web.log()
    assert "Traceback" not in log
    assert "No route found" not in log
