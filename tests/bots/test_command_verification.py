"""The verification settings commands (spec §4.5, §4.6) and the generation (spec §5.2).

General only; every real change is one transaction that voids all outstanding challenges and
advances ``verify_generation``; a same-value switch bumps nothing; switching back never revives
a voided challenge.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from bots import texts
from bots.models import BotUser, ProcessedUpdate, Setting, Topic
from bots.services.settings import InvalidSwitchValue, verification_setting_change
from tests.bots.helpers import (
    answer_rightly,
    click,
    dm_texts,
    general_texts,
    make_user,
    open_conversation,
    set_switches,
    table_state,
    topic_texts,
)


@pytest.fixture
def user(telegram):
    return telegram.user(7201, "Gail")


def _settings() -> dict[str, str]:
    return dict(Setting.objects.values_list("key", "value"))


def _general(webhook, telegram, sender, text: str) -> dict:
    update = telegram.group_message(sender, thread_id=None, text=text)
    webhook.deliver_ok(update)
    return update


def _general_reply(telegram, text: str) -> dict:
    return {"chat_id": telegram.support_chat_id, "text": text}


def _pending(telegram, user) -> tuple:
    row = BotUser.objects.get(bot_id=telegram.bot.id, user_id=user.id)
    return row.verify_request_hash, row.verify_msg_id, row.verify_request_generation


# ------------------------------------------------------------------ each command


# (command, settings afterwards on a fresh install, reply)
CHANGES = [
    (
        "/verifyoff",
        {"verify_enabled": "0", "verify_generation": "1"},
        texts.verification_turned_off,
    ),
    (
        "/verifymode_button",
        {"verify_mode": "button", "verify_generation": "1"},
        texts.verification_mode_set_button,
    ),
    (
        "/verifymode button",
        {"verify_mode": "button", "verify_generation": "1"},
        texts.verification_mode_set_button,
    ),
    (
        "/verifymode_button@hodor_test_bot please",  # extra arguments are ignored
        {"verify_mode": "button", "verify_generation": "1"},
        texts.verification_mode_set_button,
    ),
    # The values in effect already (the defaults): stored, but nothing bumped.
    ("/verifyon", {"verify_enabled": "1"}, texts.verification_turned_on),
    ("/verifymode_math", {"verify_mode": "math"}, texts.verification_mode_set_math),
    ("/verifymode math", {"verify_mode": "math"}, texts.verification_mode_set_math),
]


@pytest.mark.parametrize(("text", "stored", "reply"), CHANGES)
def test_a_switch_command_in_general_sets_the_switch_and_replies_without_thread(
    text, stored, reply, webhook, telegram, admin
):
    _general(webhook, telegram, admin, text)

    assert _settings() == stored
    [call] = telegram.calls()
    assert call.params == _general_reply(telegram, reply())
    assert general_texts(telegram) == [reply()]


def test_a_real_change_voids_every_pending_challenge_but_no_verification(
    webhook, telegram, admin, user, clock
):
    verified = telegram.user(7202, "Hal")
    make_user(verified, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    assert _pending(telegram, user)[0] is not None

    _general(webhook, telegram, admin, "/verifyoff")

    assert _pending(telegram, user) == (None, None, None)
    row = BotUser.objects.get(user_id=user.id)
    assert (row.verify_answer, row.verify_request_expires_at, row.verify_submit_not_before) == (
        None,
        None,
        None,
    )
    hal = BotUser.objects.get(user_id=verified.id)
    assert (hal.is_verified, hal.verified_at) == (True, clock.now)

    _general(webhook, telegram, admin, "/verifyon")

    assert _settings() == {"verify_enabled": "1", "verify_generation": "2"}
    assert BotUser.objects.get(user_id=verified.id).is_verified is True


def test_verifymode_alone_shows_the_mode_and_writes_nothing(webhook, telegram, admin):
    set_switches(verify_enabled="0", verify_mode="button")
    before = table_state()

    _general(webhook, telegram, admin, "/verifymode")

    assert table_state() == before
    [text] = general_texts(telegram)
    assert text == texts.verification_mode_current(mode="button", enabled=False)
    assert text == (
        "当前验证方式：纯按钮（验证已关闭）\n"
        "切换：/verifymode_math、/verifymode_button、/verifymode_turnstile，"
        "或 /verifymode math|button|turnstile"
    )


@pytest.mark.parametrize(
    "text", ["/verifymode foo", "/verifymode Math", "/verifymode math now", "/verifymode 1"]
)
def test_a_bad_mode_argument_gets_the_usage_and_changes_nothing(text, webhook, telegram, admin):
    _general(webhook, telegram, admin, text)

    assert _settings() == {}
    assert general_texts(telegram) == [texts.verification_mode_usage()]


@pytest.mark.parametrize("text", ["/verifymode_turnstile", "/verifymode turnstile"])
def test_turnstile_switches_when_both_keys_are_set(
    text, webhook, bot_settings, telegram, admin, user
):
    bot_settings.TURNSTILE_SITE_KEY = "0x4AAAAAAAreal-site-key"
    bot_settings.TURNSTILE_SECRET_KEY = "0x4AAAAAAAreal-secret-key"
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    assert _pending(telegram, user)[0] is not None  # a math challenge is pending

    _general(webhook, telegram, admin, text)

    assert _settings() == {"verify_mode": "turnstile", "verify_generation": "1"}
    assert _pending(telegram, user) == (None, None, None)  # voided by the real change
    assert general_texts(telegram) == [texts.verification_mode_set_turnstile()]


@pytest.mark.parametrize(
    ("site_key", "secret_key", "missing"),
    [
        (None, None, ["TURNSTILE_SITE_KEY", "TURNSTILE_SECRET_KEY"]),
        ("0x4AAAAAAAreal-site-key", None, ["TURNSTILE_SECRET_KEY"]),
        (None, "0x4AAAAAAAreal-secret-key", ["TURNSTILE_SITE_KEY"]),
        ("   ", "0x4AAAAAAAreal-secret-key", ["TURNSTILE_SITE_KEY"]),  # blank after trim
    ],
)
def test_turnstile_is_refused_without_both_keys(
    site_key, secret_key, missing, webhook, bot_settings, telegram, admin, user
):
    bot_settings.TURNSTILE_SITE_KEY = site_key
    bot_settings.TURNSTILE_SECRET_KEY = secret_key
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    before = table_state()

    _general(webhook, telegram, admin, "/verifymode_turnstile")

    assert table_state() == before
    assert general_texts(telegram) == [texts.turnstile_missing_keys(missing)]
    assert general_texts(telegram)[0].startswith(
        f"无法切换为 Turnstile 网页验证：缺少 {', '.join(missing)}。"
    )


SETTINGS_COMMANDS = [
    "/verifyon",
    "/verifyoff",
    "/verifymode",
    "/verifymode button",
    "/verifymode_math",
    "/verifymode_button",
    "/verifymode_turnstile",
]


@pytest.mark.parametrize("text", SETTINGS_COMMANDS)
def test_in_a_topic_the_settings_commands_point_to_general(
    text, webhook, telegram, admin, user, clock
):
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    before = table_state()
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text=text))

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == {
        "chat_id": telegram.support_chat_id,
        "message_thread_id": topic.thread_id,
        "text": texts.use_in_general(),
    }


@pytest.mark.parametrize("text", SETTINGS_COMMANDS)
def test_a_member_gets_admins_only_in_general(text, webhook, telegram, member, user):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    before = table_state()
    telegram.forget_calls()

    _general(webhook, telegram, member, text)

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == _general_reply(telegram, texts.admins_only())


def test_a_repeated_switch_bumps_once_and_keeps_the_new_challenge(
    webhook, telegram, admin, user, clock
):
    _general(webhook, telegram, admin, "/verifymode_button")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))  # a button challenge
    pending = _pending(telegram, user)
    assert pending[2] == 1

    _general(webhook, telegram, admin, "/verifymode_button")

    assert _settings() == {"verify_mode": "button", "verify_generation": "1"}
    assert _pending(telegram, user) == pending
    assert general_texts(telegram) == [texts.verification_mode_set_button()] * 2


def test_a_retryable_reply_failure_converges_without_a_second_bump(
    webhook, telegram, admin, user, clock, inbox
):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    update = telegram.group_message(admin, thread_id=None, text="/verifymode_button")
    telegram.fail("sendMessage", status=500)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert _settings() == {"verify_mode": "button", "verify_generation": "1"}
    assert _pending(telegram, user) == (None, None, None)

    inbox.later(seconds=60)

    assert _settings() == {"verify_mode": "button", "verify_generation": "1"}
    assert general_texts(telegram) == [texts.verification_mode_set_button()]
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


# ------------------------------------------------------------------ the generation


def test_a_mode_switch_voids_the_challenge_and_switching_back_does_not_revive_it(
    webhook, telegram, admin, user, clock
):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    challenge = telegram.bot_messages(user.id)[-1]

    _general(webhook, telegram, admin, "/verifymode_button")
    assert answer_rightly(webhook, telegram, user, challenge) == texts.toast_challenge_expired()

    _general(webhook, telegram, admin, "/verifymode_math")  # back to the mode it was issued in
    assert _settings()["verify_generation"] == "2"
    assert answer_rightly(webhook, telegram, user, challenge) == texts.toast_challenge_expired()
    assert BotUser.objects.get(user_id=user.id).is_verified is False

    clock.advance(seconds=61)
    webhook.deliver_ok(telegram.private_message(user, text="again"))
    fresh = telegram.bot_messages(user.id)[-1]
    assert fresh.message_id != challenge.message_id
    assert _pending(telegram, user)[2] == 2
    toast = answer_rightly(webhook, telegram, user, fresh)

    assert toast == texts.toast_verified()
    assert BotUser.objects.get(user_id=user.id).is_verified is True


def test_a_same_value_switch_keeps_the_outstanding_challenge(webhook, telegram, admin, user):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    challenge = telegram.bot_messages(user.id)[-1]
    pending = _pending(telegram, user)

    _general(webhook, telegram, admin, "/verifymode_math")
    _general(webhook, telegram, admin, "/verifyon")

    assert _pending(telegram, user) == pending
    assert "verify_generation" not in _settings()
    toast = answer_rightly(webhook, telegram, user, challenge)
    assert toast == texts.toast_verified()


def test_a_challenge_behind_the_generation_never_completes(webhook, telegram, admin, user):
    """Belt and braces: even if a challenge's columns survived a switch change (a reserve that
    raced the change), its generation is behind, and it is void."""
    webhook.deliver_ok(telegram.private_message(user, text="hi"))
    challenge = telegram.bot_messages(user.id)[-1]
    set_switches(verify_generation="1")  # as a change would; the row still says generation 0

    toast = answer_rightly(webhook, telegram, user, challenge)

    assert toast == texts.toast_challenge_expired()
    assert BotUser.objects.get(user_id=user.id).is_verified is False


def test_after_switching_to_button_new_challenges_are_buttons(webhook, telegram, admin, user):
    _general(webhook, telegram, admin, "/verifymode button")

    webhook.deliver_ok(telegram.private_message(user, text="hi"))

    challenge = telegram.bot_messages(user.id)[-1]
    assert challenge.text == texts.challenge_button()
    assert click(webhook, telegram, user, challenge.message_id, "v:0") == texts.toast_verified()


def test_verifyoff_lets_unverified_users_through_and_verifyon_holds_them_again(
    webhook, telegram, admin, user, clock
):
    webhook.deliver_ok(telegram.private_message(user, text="hi"))  # held: welcome + challenge
    _general(webhook, telegram, admin, "/verifyoff")
    clock.advance(seconds=1)

    webhook.deliver_ok(telegram.private_message(user, text="through"))

    topic = Topic.objects.get()
    assert topic_texts(telegram, topic.thread_id)[-1] == "through"

    _general(webhook, telegram, admin, "/verifyon")
    clock.advance(seconds=61)
    webhook.deliver_ok(telegram.private_message(user, text="held"))

    assert topic_texts(telegram, topic.thread_id)[-1] == "through"
    assert dm_texts(telegram, user)[-1].startswith("为了确认你是真人")


# ------------------------------------------------------------------ the service


@pytest.mark.django_db
def test_malformed_stored_values_count_as_their_defaults():
    set_switches(verify_mode="MATH", verify_enabled="yes", verify_generation="abc")

    assert verification_setting_change(bot_id=1, key="verify_mode", value="math") is False
    assert verification_setting_change(bot_id=1, key="verify_enabled", value="1") is False
    assert _settings() == {"verify_mode": "math", "verify_enabled": "1", "verify_generation": "abc"}

    assert verification_setting_change(bot_id=1, key="verify_mode", value="button") is True
    assert _settings()["verify_generation"] == "1"  # an unreadable generation restarts at 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("key", "value"),
    [("verify_mode", "turnstile!"), ("verify_enabled", "2"), ("verify_generation", "5")],
)
def test_the_service_refuses_what_is_not_a_switch_value(key, value):
    with pytest.raises(InvalidSwitchValue):
        verification_setting_change(bot_id=1, key=key, value=value)
    assert _settings() == {}


@pytest.mark.django_db
def test_a_change_touches_only_the_bot_s_users(clock):
    for bot_id in (1, 2):
        BotUser.objects.create(
            bot_id=bot_id,
            user_id=10,
            first_seen_at=clock.now,
            last_seen_at=clock.now,
            verify_request_hash="h" * 64,
            verify_request_generation=0,
        )

    assert verification_setting_change(bot_id=1, key="verify_mode", value="button") is True

    assert BotUser.objects.get(bot_id=1).verify_request_hash is None
    assert BotUser.objects.get(bot_id=2).verify_request_hash == "h" * 64


@pytest.mark.django_db
def test_a_change_is_one_transaction(clock):
    """The upsert of the value fails last: the cleared challenges and the bump roll back."""
    BotUser.objects.create(
        bot_id=1,
        user_id=10,
        first_seen_at=clock.now,
        last_seen_at=clock.now,
        verify_request_hash="h" * 64,
        verify_request_generation=0,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "create function refuse_mode() returns trigger language plpgsql as "
            "$$ begin raise exception 'settings unavailable'; end $$"
        )
        cursor.execute(
            "create trigger refuse_mode before insert or update on settings for each row "
            "when (new.key = 'verify_mode') execute function refuse_mode()"
        )

    with pytest.raises(DatabaseError):
        verification_setting_change(bot_id=1, key="verify_mode", value="button")

    assert BotUser.objects.get().verify_request_hash == "h" * 64
    assert _settings() == {}
