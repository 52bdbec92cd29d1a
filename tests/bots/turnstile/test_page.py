"""``GET /telegram/verify?r=…``: the Mini App page as served (spec §1.2, §5.5) — headers, the CSP
and its nonce, what is handed to the script, and that opening it changes nothing. (The page in a
real browser: test_browser.py.)"""

from __future__ import annotations

import json
import re

import pytest

from bots import texts
from tests.bots.helpers import table_state
from tests.bots.turnstile.helpers import SUBMIT_PATH

PAGE = "/telegram/verify"
REQUEST_ID = "0123456789abcdef" * 4
NONCE = re.compile(r"'nonce-([A-Za-z0-9_-]+)'")


@pytest.fixture
def page_settings(turnstile_settings):
    turnstile_settings.TELEGRAM_WEBAPP_SCRIPT_URL = "https://telegram.org/js/telegram-web-app.js"
    turnstile_settings.TURNSTILE_SCRIPT_URL = (
        "https://challenges.cloudflare.com/turnstile/v0/api.js"
    )
    return turnstile_settings


def _page_json(response) -> dict:
    html = response.content.decode()
    match = re.search(
        r'<script id="hodor-verify-page" type="application/json">(.*?)</script>', html, re.S
    )
    return json.loads(match.group(1))


def test_the_page_headers_and_its_strict_csp(client, page_settings, db):
    response = client.get(PAGE, {"r": REQUEST_ID})

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "X-Frame-Options" not in response  # Telegram shows Mini Apps in a frame
    [nonce] = NONCE.findall(response["Content-Security-Policy"])
    assert response["Content-Security-Policy"] == (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}' https://telegram.org https://challenges.cloudflare.com; "
        "frame-src https://challenges.cloudflare.com; "
        "connect-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'"
    )
    html = response.content.decode()
    assert html.count(f'nonce="{nonce}"') == 2  # the WebApp script and the inline script
    assert '<script src="https://telegram.org/js/telegram-web-app.js"' in html
    assert "frame-ancestors" not in response["Content-Security-Policy"]


def test_every_response_gets_its_own_nonce(client, page_settings, db):
    first = client.get(PAGE, {"r": REQUEST_ID})["Content-Security-Policy"]
    second = client.get(PAGE, {"r": REQUEST_ID})["Content-Security-Policy"]

    assert NONCE.findall(first) != NONCE.findall(second)
    assert len(NONCE.findall(first)[0]) >= 24


def test_the_script_gets_the_site_key_request_id_and_widget_parameters(
    client, page_settings, turnstile, db
):
    page = _page_json(client.get(PAGE, {"r": REQUEST_ID}))

    assert {key: page[key] for key in ("siteKey", "requestId", "action", "submitUrl")} == {
        "siteKey": turnstile.site_key,
        "requestId": REQUEST_ID,
        "action": "hodor_verify",
        "submitUrl": SUBMIT_PATH,
    }
    assert page["turnstileScriptUrl"] == (
        "https://challenges.cloudflare.com/turnstile/v0/api.js"
        "?render=explicit&onload=hodorTurnstileReady"
    )
    assert page["texts"]["outside"] == texts.verify_page_outside_telegram()


def test_the_page_speaks_the_bot_language(client, page_settings, db):
    page_settings.BOT_LANGUAGE = "en"

    response = client.get(PAGE, {"r": REQUEST_ID})

    html = response.content.decode()
    assert '<html lang="en">' in html
    assert "<title>Human verification</title>" in html
    assert _page_json(response)["texts"]["outside"] == (
        "Please open this page with the button in your Telegram chat with the bot."
    )


def test_opening_the_page_reads_and_writes_nothing(
    client, page_settings, webhook, telegram, user, django_assert_num_queries
):
    from tests.bots.helpers import set_switches
    from tests.bots.turnstile.helpers import latest_link

    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    link = latest_link(telegram, user)
    before = table_state()

    with django_assert_num_queries(0):
        response = client.get(PAGE, {"r": link.request_id})

    assert response.status_code == 200
    assert table_state() == before


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"r": ""},
        {"r": REQUEST_ID.upper()},
        {"r": REQUEST_ID[:-1]},
        {"r": REQUEST_ID + "0"},
        {"r": "z" * 64},
        {"r": [REQUEST_ID, REQUEST_ID]},
    ],
    ids=["missing", "empty", "uppercase", "63", "65", "not-hex", "twice"],
)
def test_a_malformed_request_id_is_a_plain_400(query, client, page_settings, db):
    response = client.get(PAGE, query)

    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == texts.verify_page_bad_link()
    assert response["Cache-Control"] == "no-store"


def test_other_methods_are_not_found(client, page_settings, db):
    assert client.post(f"{PAGE}?r={REQUEST_ID}").status_code == 404
    assert client.get(SUBMIT_PATH).status_code == 404
    assert client.put(SUBMIT_PATH).status_code == 404
    assert client.get(SUBMIT_PATH).content == b"Not Found"
