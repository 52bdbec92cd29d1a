"""The Turnstile page in headless Chromium (Debian's chromium, offline): the project over https
on 127.0.0.1, the fake telegram-web-app.js and Turnstile scripts, the fake Siteverify.

The user gets the challenge the real way (the webhook), and "presses the button": the browser
loads the button's URL with Telegram's launch fragment (``#tgWebAppData=<signed initData>``), as
Telegram's clients do. Screenshots: var/screenshots/turnstile-*.png (listed in the summary).
"""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import Topic
from tests import browser as browser_tools
from tests.bots.conftest import Webhook
from tests.bots.helpers import set_switches, user_row
from tests.bots.turnstile.helpers import init_data_for, latest_link
from tests.fakes.telegram_webapp import launch_url, sign_init_data

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def _state(browser) -> str:
    return browser.script("return document.getElementById('app').dataset.state")


def _status(browser) -> str:
    return browser.script("return document.getElementById('status').textContent")


def _wait_for_state(browser, state: str) -> None:
    browser.wait_until(lambda: _state(browser) == state, what=f"page state {state!r}")


def _csp_violations(browser) -> list[str]:
    return [
        entry["message"]
        for entry in browser.console()
        if "Content Security Policy" in entry["message"]
    ]


@pytest.fixture
def challenged(live_page_settings, client, bot_row, telegram, user):
    """Tess wrote to the bot in Turnstile mode; the Mini App button she got."""
    set_switches(verify_mode="turnstile")
    Webhook(client).deliver_ok(telegram.private_message(user, text="hi"))
    return latest_link(telegram, user)


def test_opened_from_telegram_the_page_verifies_the_user(
    browser, challenged, https_live_server, client, telegram, turnstile, user
):
    assert challenged.url.startswith(f"{https_live_server.url}/telegram/verify?r=")

    browser.open(launch_url(challenged.url, sign_init_data(telegram.token, user)))
    _wait_for_state(browser, "verified")
    browser.screenshot("turnstile-verified")

    assert _status(browser) == texts.verify_page_verified()
    assert browser.script("return window.__fakeTelegramWebApp") == {
        "ready": 1,
        "expand": 1,
        "close": 0,
    }
    [widget] = turnstile.widgets  # rendered explicitly with the page's parameters
    assert (widget.site_key, widget.hostname, widget.action, widget.cdata) == (
        turnstile.site_key,
        "127.0.0.1",
        "hodor_verify",
        challenged.request_id,
    )
    [verify] = turnstile.siteverify_requests()
    assert verify.json()["response"] == widget.token
    row = user_row(telegram, user)
    assert row.is_verified is True and row.verify_request_hash is None
    challenge = telegram.message(user.id, challenged.message.message_id)
    assert (challenge.text, challenge.reply_markup) == (texts.verified_message(), None)
    assert _csp_violations(browser) == []

    # Back in the chat, the user's next message reaches support.
    Webhook(client).deliver_ok(telegram.private_message(user, text="hello support"))
    topic = Topic.objects.get(user_id=user.id)
    assert telegram.topic_messages(topic.thread_id)[-1].text == "hello support"

    browser.script("document.getElementById('close').click()")
    assert browser.script("return window.__fakeTelegramWebApp.close") == 1


def test_opened_outside_telegram_it_only_says_to_use_the_bot(
    browser, challenged, telegram, turnstile, telegram_webapp, user
):
    browser.open(challenged.url)  # a plain browser: no launch fragment, no initData
    _wait_for_state(browser, "outside")
    browser.screenshot("turnstile-outside-telegram")

    assert _status(browser) == texts.verify_page_outside_telegram()
    assert telegram_webapp.script_requests() == 1
    assert turnstile.requests_to("/turnstile/v0/api.js") == []  # no widget at all
    assert turnstile.siteverify_requests() == []
    assert user_row(telegram, user).is_verified is False
    assert _csp_violations(browser) == []


def test_a_rejected_token_offers_a_retry_that_waits_out_the_throttle(
    browser, live_page_settings, client, bot_row, telegram, turnstile, user, clock
):
    """422: the page shows why and a retry button; the retry's new token meets the 15 s submit
    window (429 + Retry-After), which the page waits out on its own, then the user is
    verified. The server's clock is the test's (moved by hand); the page's waits are real."""
    set_switches(verify_mode="turnstile")
    Webhook(client).deliver_ok(telegram.private_message(user, text="hi"))
    link = latest_link(telegram, user)
    turnstile.reject_next("invalid-input-response")

    browser.open(launch_url(link.url, init_data_for(telegram, user, clock.now)))
    _wait_for_state(browser, "rejected")
    browser.screenshot("turnstile-token-rejected")
    assert _status(browser) == texts.verify_error_token_rejected()
    assert browser.script("return document.getElementById('retry').hidden") is False
    # The spent token's widget was reset at once: a new challenge, solved, waiting for the retry.
    browser.wait_until(lambda: len(turnstile.widgets) == 2, what="the widget reset")
    assert len(turnstile.siteverify_requests()) == 1  # nothing submitted before the retry
    assert _state(browser) == "rejected"

    clock.advance(seconds=13)  # 2 s of the window left
    browser.script("document.getElementById('retry').click()")
    _wait_for_state(browser, "waiting")
    browser.screenshot("turnstile-waiting")
    assert _status(browser) in (
        texts.verify_page_waiting().replace("{seconds}", "2"),
        texts.verify_page_waiting().replace("{seconds}", "1"),
    )
    clock.advance(seconds=2)
    _wait_for_state(browser, "verified")

    assert len(turnstile.widgets) == 2  # the 422 reset the widget once: one new token
    assert [request.json()["response"] for request in turnstile.siteverify_requests()] == [
        widget.token for widget in turnstile.widgets
    ]
    assert user_row(telegram, user).is_verified is True
    assert _csp_violations(browser) == []


def test_the_screenshots_have_fonts_for_chinese_and_emoji():
    """The Chinese page's screenshots show its text and the bot's emoji, not boxes."""
    browser_tools.require_chromium()

    browser_tools.require_screenshot_fonts()


def test_siteverify_down_once_the_page_submits_again_by_itself_and_verifies(
    browser, live_page_settings, client, bot_row, telegram, turnstile, user, clock
):
    """503 (Siteverify failed both of the server's tries): the page submits once more after 2 s.
    The 503 kept the 15 s submit window, so the server's clock is moved past it first."""
    set_switches(verify_mode="turnstile")
    Webhook(client).deliver_ok(telegram.private_message(user, text="hi"))
    link = latest_link(telegram, user)
    turnstile.fail_siteverify("status", status=500, times=2)

    browser.open(launch_url(link.url, init_data_for(telegram, user, clock.now)))
    browser.wait_until(lambda: len(turnstile.siteverify_requests()) == 2, what="the failed tries")
    clock.advance(seconds=16)
    _wait_for_state(browser, "verified")

    assert len(turnstile.widgets) == 1  # the same token, submitted again
    assert len(turnstile.siteverify_requests()) == 3
    assert user_row(telegram, user).is_verified is True


def test_siteverify_down_twice_the_page_stops_and_says_so(
    browser, live_page_settings, client, bot_row, telegram, turnstile, user, clock
):
    set_switches(verify_mode="turnstile")
    Webhook(client).deliver_ok(telegram.private_message(user, text="hi"))
    link = latest_link(telegram, user)
    turnstile.fail_siteverify("status", status=500, times=4)

    browser.open(launch_url(link.url, init_data_for(telegram, user, clock.now)))
    browser.wait_until(lambda: len(turnstile.siteverify_requests()) == 2, what="the failed tries")
    clock.advance(seconds=16)
    _wait_for_state(browser, "refused")
    browser.screenshot("turnstile-unavailable")

    assert _status(browser) == texts.verify_error_unavailable()
    assert len(turnstile.siteverify_requests()) == 4  # one resubmit, not more
    assert user_row(telegram, user).is_verified is False


def test_when_the_submit_cannot_reach_the_server_the_page_tries_three_times_then_says_so(
    browser, live_page_settings, client, bot_row, telegram, turnstile, user, clock
):
    set_switches(verify_mode="turnstile")
    Webhook(client).deliver_ok(telegram.private_message(user, text="hi"))
    link = latest_link(telegram, user)
    # The submit call fails in the browser as a dropped connection would (fetch rejects).
    browser.driver.execute_cdp_cmd("Network.enable", {})
    browser.driver.execute_cdp_cmd(
        "Network.setBlockedURLs", {"urls": ["*/telegram/api/verify/turnstile*"]}
    )
    browser.driver.execute_cdp_cmd(  # counts the page's submits
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.__submits = 0; var realFetch = window.fetch;"
            " window.fetch = function () { window.__submits += 1;"
            " return realFetch.apply(this, arguments); };"
        },
    )

    browser.open(launch_url(link.url, init_data_for(telegram, user, clock.now)))
    _wait_for_state(browser, "network-error")
    browser.screenshot("turnstile-network-error")

    assert _status(browser) == texts.verify_page_network_error()
    assert turnstile.siteverify_requests() == []
    assert user_row(telegram, user).is_verified is False
    assert browser.script("return window.__submits") == 3  # the first and two retries
