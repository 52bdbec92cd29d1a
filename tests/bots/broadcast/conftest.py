"""Fixtures of the broadcast tests."""

from __future__ import annotations

import pytest

from tests.bots.broadcast.helpers import eligible_users


@pytest.fixture
def people(telegram, clock, webhook):
    """Three eligible users (6001–6003) the bot may message."""
    return eligible_users(
        telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(6001, 6004)
    )
