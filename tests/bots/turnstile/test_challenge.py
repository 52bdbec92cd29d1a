"""Turnstile challenges through the fence (spec §5.1, §5.3, §5.6): the Mini App button, the
stored request, and no downgrade when keys or an https origin are missing."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

import pytest

from bots import texts
from tests.bots.conftest import WEBHOOK_SECRET
from tests.bots.helpers import click, dm_texts, make_user, set_switches, user_row
from tests.bots.turnstile.helpers import challenge_link, latest_link, pending_columns

REQUEST_LIFETIME = timedelta(seconds=600)


def test_a_new_user_gets_welcome_and_the_mini_app_button(
    webhook, turnstile_settings, telegram, user, clock
):
    set_switches(verify_mode="turnstile", verify_generation="3")

    webhook.deliver_ok(telegram.private_message(user, text="hi"))

    welcome, challenge = telegram.bot_messages(user.id)
    assert welcome.text == texts.welcome_default()
    assert challenge.text == texts.challenge_turnstile()
    [[button]] = challenge.reply_markup["inline_keyboard"]
    assert set(button) == {"text", "web_app"}
    assert button["text"] == texts.challenge_turnstile_button()
    link = challenge_link(challenge)
    assert link.url == f"https://support.example.com/telegram/verify?r={link.request_id}"
    assert re.fullmatch(r"[0-9a-f]{64}", link.request_id)
    row = user_row(telegram, user)
    assert pending_columns(row) == (
        None,  # no answer: the page decides
        challenge.message_id,
        hashlib.sha256(bytes.fromhex(link.request_id)).hexdigest(),
        clock.now + REQUEST_LIFETIME,
        3,
        None,
    )
    assert link.request_id not in str(pending_columns(row))  # only its hash is stored


def test_without_public_base_url_the_button_uses_the_https_origin_of_the_delivery(
    client, turnstile_settings, bot_row, telegram, user, clock
):
    turnstile_settings.PUBLIC_BASE_URL = None
    turnstile_settings.ALLOWED_HOSTS = ["bot.example.org"]
    set_switches(verify_mode="turnstile")

    response = client.post(
        "/telegram/webhook",
        data=json.dumps(telegram.private_message(user, text="hi")),
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
        secure=True,
        HTTP_HOST="bot.example.org",
    )

    assert response.status_code == 200
    link = latest_link(telegram, user)
    assert link.url == f"https://bot.example.org/telegram/verify?r={link.request_id}"


def test_each_new_challenge_replaces_the_request(
    webhook, turnstile_settings, telegram, user, clock
):
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    first = latest_link(telegram, user)

    clock.advance(seconds=30)
    webhook.deliver_ok(telegram.private_message(user, text="within the minute"))
    assert latest_link(telegram, user) == first  # the notice slot: nothing new yet

    clock.advance(seconds=31)
    webhook.deliver_ok(telegram.private_message(user, text="later"))
    second = latest_link(telegram, user)

    assert second.request_id != first.request_id
    row = user_row(telegram, user)
    assert row.verify_request_hash == hashlib.sha256(bytes.fromhex(second.request_id)).hexdigest()
    assert row.verify_request_expires_at == clock.now + REQUEST_LIFETIME  # never extended


def test_the_overflow_notice_carries_the_turnstile_challenge(
    webhook, turnstile_settings, telegram, user, clock
):
    turnstile_settings.MAX_MESSAGES_PER_MINUTE = "1"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="a"))

    webhook.deliver_ok(telegram.private_message(user, text="b"))

    [overflow] = telegram.bot_messages(user.id)
    assert overflow.text == f"{texts.rate_limited_prefix(1)}\n\n{texts.challenge_turnstile()}"
    assert challenge_link(overflow).url.startswith("https://support.example.com/telegram/verify?r=")
    assert user_row(telegram, user).verify_msg_id == overflow.message_id


def test_with_verification_off_the_overflow_sends_nothing(
    webhook, turnstile_settings, telegram, user, clock
):
    """No web request could complete while verification is off (the submit answers 409)."""
    turnstile_settings.MAX_MESSAGES_PER_MINUTE = "1"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    set_switches(verify_mode="turnstile", verify_enabled="0")
    webhook.deliver_ok(telegram.private_message(user, text="a"))

    webhook.deliver_ok(telegram.private_message(user, text="b"))

    assert dm_texts(telegram, user) == []
    assert pending_columns(user_row(telegram, user)) == (None,) * 6


@pytest.mark.parametrize(
    "missing", ["TURNSTILE_SITE_KEY", "TURNSTILE_SECRET_KEY", "PUBLIC_BASE_URL"]
)
def test_never_downgraded_the_user_is_told_verification_is_unavailable(
    missing, webhook, turnstile_settings, telegram, user, caplog
):
    """Keys or an https origin missing (here the delivery is plain http, so without
    PUBLIC_BASE_URL there is none): no challenge of any mode, no fence, an honest notice."""
    setattr(turnstile_settings, missing, None)
    set_switches(verify_mode="turnstile")

    webhook.deliver_ok(telegram.private_message(user, text="hi"))

    assert dm_texts(telegram, user) == [texts.welcome_default(), texts.verification_unavailable()]
    assert pending_columns(user_row(telegram, user)) == (None,) * 6
    assert "turnstile challenge for user 8101 not issued" in caplog.text


def test_the_unavailable_notice_is_throttled_like_a_challenge(
    webhook, turnstile_settings, telegram, user, clock
):
    turnstile_settings.TURNSTILE_SECRET_KEY = None
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    clock.advance(seconds=30)
    webhook.deliver_ok(telegram.private_message(user, text="again"))
    assert len(telegram.bot_messages(user.id)) == 2

    clock.advance(seconds=31)
    webhook.deliver_ok(telegram.private_message(user, text="once more"))

    assert dm_texts(telegram, user)[-1] == texts.verification_unavailable()
    assert len(telegram.bot_messages(user.id)) == 3


def test_a_challenge_whose_send_fails_leaves_no_request(
    webhook, turnstile_settings, telegram, user
):
    set_switches(verify_mode="turnstile")
    telegram.block(user.id)

    webhook.deliver_ok(telegram.private_message(user, text="hi"))

    assert pending_columns(user_row(telegram, user)) == (None,) * 6


def test_an_old_math_button_after_the_switch_to_turnstile_is_expired(
    webhook, turnstile_settings, telegram, user, admin
):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    math_challenge = telegram.bot_messages(user.id)[-1]
    webhook.deliver_ok(telegram.group_message(admin, thread_id=None, text="/verifymode_turnstile"))

    toast = click(webhook, telegram, user, math_challenge.message_id, "v:0")

    assert toast == texts.toast_challenge_expired()
    assert user_row(telegram, user).is_verified is False
