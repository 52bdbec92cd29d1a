"""The atomic claims (spec §12): each is one conditional statement comparing against ``now``.
(The update claim itself, written with its inbox row, is test_inbox_claims'.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bots.models import Bot, BotUser, InboxUpdate, ProcessedUpdate
from bots.selectors import VerificationSettings, verification_settings_get
from bots.services.processed_updates import processed_update_trim
from bots.services.users import (
    user_claim_notice_slot,
    user_claim_risk_reminder,
    user_count_message,
    user_ensure,
)
from tests.bots.conftest import START
from tests.bots.helpers import set_switches

pytestmark = pytest.mark.django_db
BOT = 4242


def test_trim_deletes_claims_older_than_seven_days_for_every_bot():
    Bot.objects.create(bot_id=BOT, created_at=START)
    Bot.objects.create(bot_id=BOT + 1, created_at=START)
    for bot_id, update_id, age in [(BOT, 1, 8), (BOT, 2, 7), (BOT + 1, 3, 30), (BOT + 1, 4, 1)]:
        ProcessedUpdate.objects.create(
            bot_id=bot_id,
            update_id=update_id,
            status="processed",
            created_at=START - timedelta(days=age),
        )

    # An update still waiting in the inbox keeps its claim however old it is.
    ProcessedUpdate.objects.create(
        bot_id=BOT, update_id=5, status="processing", created_at=START - timedelta(days=9)
    )
    InboxUpdate.objects.create(bot_id=BOT, update_id=5, payload={"update_id": 5})

    deleted = processed_update_trim(now=START)

    assert deleted == 2
    assert sorted(ProcessedUpdate.objects.values_list("update_id", flat=True)) == [2, 4, 5]


# ------------------------------------------------------------------ users


def _user() -> None:
    user_ensure(bot_id=BOT, user_id=7, first_name="A", last_name="", username="", now=START)


def test_ensure_creates_once_and_reports_name_changes():
    first = user_ensure(bot_id=BOT, user_id=7, first_name="A", last_name="", username="", now=START)
    same = user_ensure(
        bot_id=BOT, user_id=7, first_name="A", last_name="", username="", now=START + timedelta(1)
    )
    renamed = user_ensure(
        bot_id=BOT, user_id=7, first_name="A", last_name="", username="a", now=START + timedelta(2)
    )

    assert (first.is_new, first.display_changed) == (True, False)
    assert (same.is_new, same.display_changed) == (False, False)
    assert (renamed.is_new, renamed.display_changed) == (False, True)
    row = BotUser.objects.get()
    assert (row.first_seen_at, row.last_seen_at, row.username) == (
        START,
        START + timedelta(2),
        "a",
    )
    # Each call returns the row as it stands after it (no second read needed).
    assert (first.user.first_name, first.user.first_seen_at, first.user.status) == (
        "A",
        START,
        "active",
    )
    assert (same.user.last_seen_at, same.user.username) == (START + timedelta(1), "")
    assert (renamed.user.last_seen_at, renamed.user.username, renamed.user.is_verified) == (
        START + timedelta(2),
        "a",
        False,
    )


def test_notice_slot_is_one_per_sixty_seconds_boundary_included():
    _user()
    at = START + timedelta(minutes=5)

    assert user_claim_notice_slot(bot_id=BOT, user_id=7, now=at) is True
    assert user_claim_notice_slot(bot_id=BOT, user_id=7, now=at + timedelta(seconds=59)) is False
    assert user_claim_notice_slot(bot_id=BOT, user_id=7, now=at + timedelta(seconds=60)) is True
    assert user_claim_notice_slot(bot_id=BOT + 1, user_id=7, now=at) is False  # no such user


def test_rate_window_counts_n_then_refuses_until_sixty_seconds_passed():
    _user()
    results = [
        user_count_message(bot_id=BOT, user_id=7, now=START + timedelta(seconds=s), limit=3)
        for s in (0, 10, 20, 30, 59.9)
    ]
    assert results == [True, True, True, False, False]
    row = BotUser.objects.get()
    assert (row.rate_window_start, row.rate_count) == (START, 3)

    assert user_count_message(bot_id=BOT, user_id=7, now=START + timedelta(seconds=60), limit=3)
    row = BotUser.objects.get()
    assert (row.rate_window_start, row.rate_count) == (START + timedelta(seconds=60), 1)


def test_risk_reminder_needs_the_flag_and_a_day():
    _user()
    assert user_claim_risk_reminder(bot_id=BOT, user_id=7, now=START) is False
    BotUser.objects.update(is_risk=True)

    assert user_claim_risk_reminder(bot_id=BOT, user_id=7, now=START) is True
    assert user_claim_risk_reminder(bot_id=BOT, user_id=7, now=START + timedelta(hours=23)) is False
    assert user_claim_risk_reminder(bot_id=BOT, user_id=7, now=START + timedelta(hours=24)) is True


# ------------------------------------------------------------------ settings


def test_verification_switches_default_when_missing_or_dirty():
    assert verification_settings_get() == VerificationSettings(
        enabled=True,
        mode="math",
        generation=0,
        stored={"verify_enabled": None, "verify_mode": None, "verify_generation": None},
    )
    set_switches(verify_enabled="yes", verify_mode="captcha", verify_generation="-4")

    switches = verification_settings_get()

    assert (switches.enabled, switches.mode, switches.generation) == (True, "math", 0)
    set_switches(verify_enabled="0", verify_mode="button", verify_generation="12")
    switches = verification_settings_get()
    assert (switches.enabled, switches.mode, switches.generation) == (False, "button", 12)
    set_switches(verify_generation="9" * 19)  # more than a challenge's bigint column takes
    assert verification_settings_get().generation == 0
