"""Which bot a deployment is, when the bots table remembers more than one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bots.models import Bot
from bots.selectors import bot_current_id


@pytest.fixture
def two_bots(db):
    Bot.objects.create(bot_id=111, username="first", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    Bot.objects.create(bot_id=222, username="second", created_at=datetime(2026, 6, 1, tzinfo=UTC))


def test_the_bot_of_the_configured_token_wins(two_bots, settings):
    settings.TELEGRAM_BOT_TOKEN = "111:AAsecret"

    assert bot_current_id() == 111  # switched back to the first bot: not the newest row


def test_without_a_matching_token_the_most_recently_bound_bot_is_current(two_bots, settings):
    settings.TELEGRAM_BOT_TOKEN = None

    assert bot_current_id() == 222


@pytest.mark.django_db
def test_no_bot_bound_yet():
    assert bot_current_id() is None
