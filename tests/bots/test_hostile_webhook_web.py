"""Hostile update bodies through the real web process (``config.run web``) to the webhook:
a value nested as deep as the JSON parser accepts, and text no database can store (a lone
surrogate, a NUL), are answered 200 — never a 500 that Telegram would redeliver — and the
update is processed with that text replaced (U+FFFD) on the way in."""

from __future__ import annotations

import json

import pytest
import requests
from django.utils import timezone

from bots.models import Bot, BotUser, ProcessedUpdate
from tests.bots.conftest import ADMIN_ID, ADMIN_SECRET, WEBHOOK_SECRET
from tests.web_process import WebProcess

pytestmark = pytest.mark.subprocess

HOOK = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET, "Content-Type": "application/json"}


@pytest.fixture
def web(transactional_db, tmp_path, telegram):
    Bot.objects.create(
        bot_id=telegram.bot.id,
        username="hodor_test_bot",
        display_name="Hodor",
        created_at=timezone.now(),
    )
    process = WebProcess(
        tmp_path,
        TELEGRAM_API_BASE=telegram.api_base,
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
        ADMIN_SECRET=ADMIN_SECRET,
        SUPPORT_CHAT_ID=str(telegram.support_chat_id),
        ADMIN_IDS=str(ADMIN_ID),
    )
    yield process
    process.stop()


@pytest.mark.parametrize("depth", [800, 990])
def test_a_value_nested_as_deep_as_the_parser_accepts_is_acknowledged(web, telegram, depth):
    user = telegram.user(4321, "Frank")
    update = telegram.private_message(user, text="hello")
    body = json.dumps(update).encode()
    nested = b"[" * depth + b'"deep"' + b"]" * depth
    body = body.replace(b'"text": "hello"', b'"text": "hello", "nested": ' + nested)

    response = requests.post(f"{web.url}/telegram/webhook", data=body, headers=HOOK, timeout=30)

    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    assert "Traceback" not in web.log()
    assert "Internal Server Error" not in web.log()


def test_unstorable_text_in_an_update_is_replaced_and_the_update_processed(web, telegram):
    user = telegram.user(4322, "MARK")
    update = telegram.private_message(user, text="hi TEXTMARK")
    body = (
        json.dumps(update)
        .replace('"MARK"', '"Fr\\ud800ank\\u0000"')
        .replace("TEXTMARK", "\\udfff there")
        .encode()
    )

    response = requests.post(f"{web.url}/telegram/webhook", data=body, headers=HOOK, timeout=30)

    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    [processed] = ProcessedUpdate.objects.filter(update_id=update["update_id"])
    assert processed.status == "processed"
    assert BotUser.objects.get(user_id=4322).first_name == "Fr\ufffdank\ufffd"
    assert "Traceback" not in web.log()
