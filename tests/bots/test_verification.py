"""Verification in math and button modes (spec §5.1–§5.4, §5.6)."""

from __future__ import annotations

import random

import pytest

from bots import texts
from bots.models import BotUser, RelayedMessage, Topic
from bots.selectors import verification_settings_get
from bots.services.challenges import challenge_reserve, challenge_restore, user_verify
from bots.services.settings import verification_setting_change
from bots.verification.challenge import button_challenge, math_challenge, parse_callback_value
from tests.bots.conftest import Clock
from tests.bots.helpers import (
    MATH_QUESTION,
    answer_rightly,
    click,
    dm_texts,
    make_user,
    set_switches,
    solve_challenge,
    user_row,
)


@pytest.fixture
def user(telegram):
    return telegram.user(6001, "Carol", username="carol")


def _values(message) -> list[int]:
    return [
        int(button["callback_data"][2:]) for button in message.reply_markup["inline_keyboard"][0]
    ]


def _challenge(telegram, user):
    return telegram.bot_messages(user.id)[-1]


# ------------------------------------------------------------------ generation


def test_math_challenge_is_deterministic_for_a_given_random_source():
    first = math_challenge(random.Random(7))
    second = math_challenge(random.Random(7))

    assert first == second


@pytest.mark.parametrize("seed", range(200))
def test_math_challenge_structure(seed):
    challenge = math_challenge(random.Random(seed))

    first, operator, second = MATH_QUESTION.search(challenge.text).groups()
    assert 1 <= int(first) <= 9 and 1 <= int(second) <= 9
    if operator == "-":
        assert int(first) >= int(second)
    assert challenge.answer == solve_challenge(challenge.text)
    [buttons] = challenge.reply_markup["inline_keyboard"]
    values = [int(button["callback_data"].removeprefix("v:")) for button in buttons]
    assert len(values) == len(set(values)) == 4
    assert challenge.answer in values
    assert all(0 <= value <= 18 for value in values)
    assert [button["text"] for button in buttons] == [str(value) for value in values]
    assert all(set(button) == {"text", "callback_data"} for button in buttons)


def test_button_challenge_has_one_button_worth_zero():
    challenge = button_challenge()

    assert challenge.answer == 0
    assert challenge.reply_markup == {
        "inline_keyboard": [[{"text": "我不是机器人", "callback_data": "v:0"}]]
    }


@pytest.mark.parametrize(
    ("data", "value"),
    [("v:0", 0), ("v:18", 18), ("v:", None), ("v:-1", None), ("v:1x", None), ("d:1", None)],
)
def test_callback_payload(data, value):
    assert parse_callback_value(data) == value


# ------------------------------------------------------------------ journeys


def test_math_journey_first_message_wrong_right_then_relayed(webhook, telegram, user, clock):
    webhook.deliver_ok(telegram.private_message(user, text="hello?"))
    welcome, challenge = telegram.bot_messages(user.id)
    assert welcome.text == texts.welcome_default()
    first_hash = user_row(telegram, user).verify_request_hash

    wrong = next(value for value in _values(challenge) if value != solve_challenge(challenge.text))
    toast = click(webhook, telegram, user, challenge.message_id, f"v:{wrong}")

    assert toast == "回答错误，请再试一次。"
    reissued = telegram.message(user.id, challenge.message_id)
    assert reissued.text.startswith(
        "回答错误，请再试一次。\n\n为了确认你是真人，请回答下面的问题：\n"
    )
    assert len(telegram.bot_messages(user.id)) == 2  # edited in place, no new push
    row = user_row(telegram, user)
    assert row.verify_request_hash != first_hash
    assert (row.verify_msg_id, row.is_verified) == (challenge.message_id, False)

    clock.advance(seconds=20)
    right = solve_challenge(reissued.text)
    toast = click(webhook, telegram, user, challenge.message_id, f"v:{right}")

    assert toast == "验证通过！"
    verified = telegram.message(user.id, challenge.message_id)
    assert (verified.text, verified.reply_markup) == ("✅ 验证通过，现在可以发送消息了。", None)
    row = user_row(telegram, user)
    assert (row.is_verified, row.verified_at) == (True, clock.now)
    assert (row.verify_request_hash, row.verify_msg_id, row.verify_answer) == (None, None, None)
    assert Topic.objects.count() == 0  # the dropped "hello?" is never replayed

    webhook.deliver_ok(telegram.private_message(user, text="now it works"))

    topic = Topic.objects.get()
    shown = [message.text for message in telegram.topic_messages(topic.thread_id)]
    assert shown[-1] == "now it works"
    assert "验证状态：✅ 已验证" in shown[0]
    assert RelayedMessage.objects.count() == 1


def test_button_journey(webhook, telegram, user, clock):
    set_switches(verify_mode="button")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    challenge = _challenge(telegram, user)
    assert challenge.text == "请点击下方按钮，确认你不是机器人。"
    assert _values(challenge) == [0]

    forged = click(webhook, telegram, user, challenge.message_id, "v:1")
    assert forged == "回答错误，请再试一次。"

    toast = click(webhook, telegram, user, challenge.message_id, "v:0")

    assert toast == "验证通过！"
    assert user_row(telegram, user).is_verified is True
    webhook.deliver_ok(telegram.private_message(user, text="relayed"))
    assert RelayedMessage.objects.count() == 1


def test_overflow_re_verification_journey(webhook, bot_settings, telegram, user, clock):
    bot_settings.MAX_MESSAGES_PER_MINUTE = "1"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    webhook.deliver_ok(telegram.private_message(user, text="two"))
    challenge = _challenge(telegram, user)
    topic = Topic.objects.get()
    card = telegram.message(telegram.support_chat_id, topic.pinned_msg_id)
    assert "验证状态：❌ 未验证" in card.text

    clock.advance(seconds=61)
    answer_rightly(webhook, telegram, user, challenge)

    assert "验证状态：✅ 已验证" in telegram.message(telegram.support_chat_id, card.message_id).text
    webhook.deliver_ok(telegram.private_message(user, text="three"))
    assert [m.text for m in telegram.topic_messages(topic.thread_id)][1:] == ["one", "three"]


# ------------------------------------------------------------------ stale, foreign, replayed


def test_an_old_challenge_gets_the_expired_toast(webhook, telegram, user, clock):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    old = _challenge(telegram, user)
    clock.advance(seconds=61)
    webhook.deliver_ok(telegram.private_message(user, text="two"))
    before = user_row(telegram, user)
    telegram.forget_calls()

    toast = answer_rightly(webhook, telegram, user, old)

    assert toast == "验证已失效，请发送任意消息获取新的验证。"
    assert telegram.methods() == ["answerCallbackQuery"]
    after = user_row(telegram, user)
    assert (after.is_verified, after.verify_request_hash) == (False, before.verify_request_hash)


def test_someone_elses_challenge_gets_the_expired_toast(webhook, telegram, user):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    intruder = telegram.user(6002, "Eve")
    webhook.deliver_ok(telegram.private_message(intruder, text="me too"))
    update = telegram.click(intruder, message_id=challenge.message_id, data="v:3", chat_id=user.id)

    webhook.deliver_ok(update)

    assert (
        telegram.callback_answer(update["callback_query"]["id"]) == texts.toast_challenge_expired()
    )
    assert user_row(telegram, user).is_verified is False
    assert user_row(telegram, intruder).is_verified is False


def test_a_replayed_right_answer_gets_the_expired_toast(webhook, telegram, user):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    right = f"v:{solve_challenge(challenge.text)}"
    assert click(webhook, telegram, user, challenge.message_id, right) == "验证通过！"

    toast = click(webhook, telegram, user, challenge.message_id, right)

    assert toast == texts.toast_challenge_expired()


@pytest.mark.parametrize("data", ["v:", "v:abc", "x:1", "", "v:12345678901"])
def test_malformed_payloads_are_silent(webhook, telegram, user, data):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    telegram.forget_calls()

    click(webhook, telegram, user, challenge.message_id, data)

    assert telegram.calls() == []


def test_a_cleared_challenge_cannot_complete(webhook, telegram, user):
    """What a mode/switch change does (§5.2): pending cleared, generation bumped."""
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    set_switches(verify_mode="button", verify_generation="1")
    BotUser.objects.update(verify_request_hash=None, verify_request_generation=None)
    set_switches(verify_mode="math", verify_generation="2")  # switching back revives nothing

    toast = answer_rightly(webhook, telegram, user, challenge)

    assert toast == texts.toast_challenge_expired()
    assert user_row(telegram, user).is_verified is False


def test_a_banned_user_cannot_complete_a_challenge(webhook, telegram, user):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    BotUser.objects.update(is_banned=True)

    toast = answer_rightly(webhook, telegram, user, challenge)

    assert toast == texts.toast_challenge_expired()
    assert user_row(telegram, user).is_verified is False


# ------------------------------------------------------------------ the fence under failures


def test_a_blocked_user_leaves_no_pending_challenge(webhook, telegram, user):
    update = telegram.private_message(user, text="hi")
    telegram.block(user.id)

    webhook.deliver_ok(update)

    row = user_row(telegram, user)
    assert (row.verify_request_hash, row.verify_msg_id, row.verify_answer) == (None, None, None)


def test_a_retryable_challenge_failure_converges_on_redelivery(
    webhook, telegram, user, clock, inbox
):
    update = telegram.private_message(user, text="hi")
    telegram.fail_call(2, status=500)  # the challenge, after the welcome

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert user_row(telegram, user).verify_request_hash is None  # the fence was released

    inbox.later(seconds=60)

    assert dm_texts(telegram, user)[0] == texts.welcome_default()  # welcome sent once
    assert len(telegram.bot_messages(user.id)) == 2
    assert user_row(telegram, user).verify_msg_id == _challenge(telegram, user).message_id


def test_a_wrong_answer_whose_edit_fails_leaves_the_message_stale(webhook, telegram, user):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    wrong = next(value for value in _values(challenge) if value != solve_challenge(challenge.text))
    telegram.fail(
        "editMessageText", status=400, description="Bad Request: message to edit not found"
    )

    click(webhook, telegram, user, challenge.message_id, f"v:{wrong}")

    row = user_row(telegram, user)
    assert row.verify_msg_id is None  # the new fence was never attached
    toast = answer_rightly(webhook, telegram, user, challenge)
    assert toast == texts.toast_challenge_expired()


def test_a_retryable_failure_of_the_wrong_answer_toast_is_retried(
    webhook, telegram, user, clock, inbox
):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    challenge = _challenge(telegram, user)
    wrong = next(value for value in _values(challenge) if value != solve_challenge(challenge.text))
    update = telegram.click(user, message_id=challenge.message_id, data=f"v:{wrong}")
    telegram.fail("answerCallbackQuery", status=500)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    inbox.later(seconds=60)

    assert telegram.callback_answer(update["callback_query"]["id"]) == "回答错误，请再试一次。"


# ------------------------------------------------------------------ the conditional statements


@pytest.mark.django_db
def test_reserve_is_abandoned_when_the_switches_changed_since_the_snapshot(clock):
    BotUser.objects.create(bot_id=1, user_id=2, first_seen_at=clock.now, last_seen_at=clock.now)
    snapshot = verification_settings_get()
    set_switches(verify_mode="button")

    reserved = challenge_reserve(bot_id=1, user_id=2, request_hash="a" * 64, snapshot=snapshot)

    assert reserved is False
    assert BotUser.objects.get().verify_request_hash is None
    assert challenge_reserve(
        bot_id=1, user_id=2, request_hash="a" * 64, snapshot=verification_settings_get()
    )


@pytest.mark.django_db
def test_restore_puts_the_shown_challenge_back_only_over_its_own_reservation(
    clock: Clock,
) -> None:
    BotUser.objects.create(
        bot_id=1,
        user_id=2,
        first_seen_at=clock.now,
        last_seen_at=clock.now,
        verify_request_hash="new" + "0" * 61,
        verify_request_generation=0,
    )
    arguments = {
        "bot_id": 1,
        "user_id": 2,
        "generation": 0,
        "previous_hash": "old" + "0" * 61,
        "previous_answer": 7,
        "message_id": 10,
    }

    assert challenge_restore(**arguments, request_hash="other" + "0" * 59) is False
    assert BotUser.objects.get().verify_request_hash == "new" + "0" * 61
    assert challenge_restore(**arguments, request_hash="new" + "0" * 61) is True
    row = BotUser.objects.get()
    assert (row.verify_request_hash, row.verify_answer, row.verify_msg_id) == (
        "old" + "0" * 61,
        7,
        10,
    )
    # A mode switch voids every pending challenge: nothing is left to restore over.
    BotUser.objects.update(verify_request_hash="new" + "0" * 61)
    verification_setting_change(bot_id=1, key="verify_mode", value="button")
    assert challenge_restore(**arguments, request_hash="new" + "0" * 61) is False
    assert BotUser.objects.get().verify_request_hash is None


@pytest.mark.django_db
def test_verify_needs_the_mode_the_pre_check_saw(clock):
    BotUser.objects.create(
        bot_id=1,
        user_id=2,
        first_seen_at=clock.now,
        last_seen_at=clock.now,
        verify_request_hash="h" * 64,
        verify_request_generation=0,
        verify_msg_id=10,
        verify_answer=7,
    )
    snapshot = verification_settings_get()
    set_switches(verify_enabled="0")
    arguments = {
        "bot_id": 1,
        "user_id": 2,
        "message_id": 10,
        "answer": 7,
        "request_hash": "h" * 64,
        "now": clock.now,
    }

    assert user_verify(**arguments, snapshot=snapshot) is False
    assert user_verify(**arguments, snapshot=verification_settings_get()) is True
    assert user_verify(**arguments, snapshot=verification_settings_get()) is False  # once only
