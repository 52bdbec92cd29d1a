"""Fixtures of the Turnstile tests: Tess, a user with a live Turnstile request issued the real way
(she wrote to the bot in Turnstile mode and got the Mini App button), and her page's submit."""

from __future__ import annotations

import pytest

from tests.bots.helpers import set_switches
from tests.bots.turnstile.helpers import HOSTNAME, init_data_for, latest_link, submit


@pytest.fixture
def user(telegram):
    return telegram.user(8101, "Tess", username="tess")


@pytest.fixture
def pending(webhook, turnstile_settings, telegram, user, clock):
    """Tess's first message in Turnstile mode (welcome + challenge); her request's link."""
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    return latest_link(telegram, user)


@pytest.fixture
def send(client, telegram, turnstile, user, clock, pending):
    """Submit Tess's request as her page would: fresh initData, a token minted for this page;
    keyword arguments of ``helpers.submit`` replace any part."""

    def send_submit(**overrides):
        fields = {
            "request_id": pending.request_id,
            "init_data": init_data_for(telegram, user, clock.now),
            "token": turnstile.issue_token(cdata=pending.request_id, hostname=HOSTNAME),
        }
        fields.update(overrides)
        return submit(client, **fields)

    return send_submit


@pytest.fixture
def telegram_webapp():
    """The fake telegram-web-app.js (what telegram.org serves)."""
    from tests.fakes.telegram_webapp import FakeTelegramWebApp

    with FakeTelegramWebApp() as fake:
        yield fake


@pytest.fixture
def live_page_settings(turnstile_settings, https_live_server, telegram_webapp):
    """The bot served by the https live server, which is its public origin, with the page's
    scripts from the fakes."""
    turnstile_settings.PUBLIC_BASE_URL = https_live_server.url
    turnstile_settings.TELEGRAM_WEBAPP_SCRIPT_URL = telegram_webapp.script_url
    return turnstile_settings
