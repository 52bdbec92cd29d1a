"""The send loop's pace, read from the fake Bot API's arrival times (the fake itself enforces
nothing here, and answers far faster than Telegram allows: every bound below is the loop's own
doing, and a loop that ignored the limiter would break it)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from bots import texts
from bots.pipeline.broadcast import sending
from tests.bots.broadcast.helpers import (
    click,
    eligible_users,
    received,
    run_loop,
    start_draft,
)
from tests.fakes.telegram import most_in_one_second

MESSAGES = ("sendMessage", "editMessageText")


@pytest.fixture(autouse=True)
def telegrams_own_limits(bot_settings):
    """The bot keeps Telegram's limits here (the other bot tests give the outbound limiter room
    to spare): 30 messages a second, one a second per chat, 20 a minute per group."""
    bot_settings.TELEGRAM_SENDS_PER_SECOND = "30"
    bot_settings.TELEGRAM_CHAT_INTERVAL_MS = "1000"
    bot_settings.TELEGRAM_GROUP_SENDS_PER_WINDOW = "20"
    bot_settings.TELEGRAM_GROUP_WINDOW_SECONDS = "60"


def _confirmed(webhook, telegram, admin, capture) -> int:
    control = start_draft(webhook, telegram, admin)
    with capture():
        assert click(webhook, telegram, admin, control, control.confirm) == (
            texts.toast_broadcast_confirmed()
        )
    telegram.forget_calls()
    return control.broadcast_id


def _by_chat(calls) -> dict[int, list[float]]:
    arrivals = defaultdict(list)
    for call in calls:
        arrivals[call.params["chat_id"]].append(call.at)
    return arrivals


def _closest_in_one_chat(arrivals: list[float]) -> float:
    return min(later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False))


@pytest.mark.slow
def test_at_most_30_sends_in_any_second_and_none_inside_a_retry_after(
    webhook, telegram, admin, clock, django_capture_on_commit_callbacks, bot_settings
):
    bot_settings.BROADCAST_MAX_RECIPIENTS = "200"
    people = eligible_users(
        telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(7001, 7091)
    )
    broadcast_id = _confirmed(webhook, telegram, admin, django_capture_on_commit_callbacks)
    telegram.fail_call(40, status=429, retry_after=2)  # somewhere in the middle of the sends

    assert run_loop(broadcast_id) == "completed"

    calls = [call for call in telegram.calls() if call.method in MESSAGES]
    assert [len(received(telegram, person)) for person in people] == [1] * len(people)
    arrivals = [call.at for call in calls]
    assert most_in_one_second(arrivals) <= 30
    # 90 sends took three seconds at least at 30 a second, and two more for the retry_after.
    assert arrivals[-1] - arrivals[0] >= 2 + 89 / 30
    [refusal] = [call for call in calls if call.status == 429]
    assert refusal.retry_after == 2
    assert [call for call in calls if refusal.at < call.at < refusal.at + 2] == []
    # The refused recipient got it after the wait: two calls into that chat, 2 s apart.
    retried = _by_chat(calls)[refusal.params["chat_id"]]
    assert len(retried) == 2
    assert _closest_in_one_chat(retried) >= 2


@pytest.mark.slow
def test_at_most_one_call_a_second_into_one_chat(
    webhook, telegram, admin, clock, django_capture_on_commit_callbacks, monkeypatch
):
    # The loop wants to show its progress after every send: into the one support chat, far
    # faster than one call a second.
    monkeypatch.setattr(sending, "PROGRESS_EDIT_SECONDS", 0.0)
    people = eligible_users(
        telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(7101, 7106)
    )
    broadcast_id = _confirmed(webhook, telegram, admin, django_capture_on_commit_callbacks)

    assert run_loop(broadcast_id) == "completed"

    calls = [call for call in telegram.calls() if call.method in MESSAGES]
    by_chat = _by_chat(calls)
    edits = by_chat[telegram.support_chat_id]
    assert len(edits) >= 6  # the first progress, one after each send, the statistics
    assert _closest_in_one_chat(edits) >= 1.0
    assert [len(by_chat[person.id]) for person in people] == [1] * 5


def test_the_pace_checks_catch_what_they_are_meant_to():
    # The checks above, on arrivals that break them (so they can fail).
    assert most_in_one_second([0.0 + index / 40 for index in range(40)]) == 40
    assert _closest_in_one_chat([0.0, 0.5, 2.0]) == 0.5
