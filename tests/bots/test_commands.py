"""Admin commands about the topic's user (spec §4.0–§4.4) and the command pipeline itself.

Every command is checked for its effect on the tables, the Bot API calls it makes (reply, card
edit), the wrong place, a non-admin sender, a topic without binding, a repeat, and a retryable
failure of its reply followed by Telegram's redelivery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from bots import texts
from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from bots.pipeline.classify import GENERAL_COMMANDS
from bots.pipeline.commands import (
    ABOUT_THE_TOPIC_USER,
    ANY_TOPIC,
    ANYWHERE,
    GENERAL_ONLY,
    Command,
    parse_command,
)
from tests.bots.conftest import Clock, Inbox, Webhook
from tests.bots.helpers import (
    card_text,
    dm_texts,
    general_texts,
    make_user,
    open_conversation,
    set_switches,
    table_state,
    topic_texts,
)
from tests.fakes.telegram import FakeTelegram, FakeUser

USER_ID = 7001
CARD = "昵称：Dave (@dave)\n用户 ID：7001\n首次对话：2026-10-01 12:00 (UTC)\n验证状态：✅ 已验证"


@pytest.fixture
def user(telegram):
    return telegram.user(USER_ID, "Dave", username="dave")


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _send(webhook, telegram, sender, text: str, *, thread_id: int | None) -> dict:
    update = telegram.group_message(sender, thread_id=thread_id, text=text)
    webhook.deliver_ok(update)
    return update


def _reply_params(telegram, thread_id: int, text: str) -> dict:
    return {"chat_id": telegram.support_chat_id, "message_thread_id": thread_id, "text": text}


def _changes(before: dict, after: dict) -> dict:
    """The columns whose values differ, per table (rows matched by position)."""
    changed = {}
    for table in ("users", "topics"):
        for old, new in zip(before[table], after[table], strict=True):
            changed.update(
                {f"{table}.{key}": value for key, value in new.items() if old[key] != value}
            )
    assert before["messages"] == after["messages"]
    assert before["settings"] == after["settings"]
    return changed


# ------------------------------------------------------------------ parsing and routing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/ban", Command("/ban", "")),
        ("/ban@hodor_test_bot", Command("/ban", "")),
        ("/note@hodor_test_bot   VIP   customer  ", Command("/note", "VIP   customer")),
        ("/note first line\n  second line \n", Command("/note", "first line\n  second line")),
        ("/Ban", Command("/Ban", "")),
        ("/", Command("/", "")),
    ],
)
def test_parsing_strips_the_bot_suffix_and_trims_the_arguments(text, expected):
    assert parse_command(text) == expected


def test_the_general_commands_are_exactly_the_ones_classification_lets_through():
    assert set(ANYWHERE) | set(GENERAL_ONLY) == GENERAL_COMMANDS


# ------------------------------------------------------------------ the six binding commands


@dataclass(frozen=True)
class Case:
    text: str
    reply: str
    changes: dict
    card: str | None  # the pinned card after the command (None: not edited)
    setup: tuple[str, ...] = field(default=())  # commands run first (so the card matches)


CASES = [
    Case("/ban", texts.user_banned(USER_ID), {"users.is_banned": True}, None),
    Case(
        "/unban",
        texts.user_unbanned(USER_ID),
        {"users.is_banned": False},
        None,
        setup=("/ban",),
    ),
    Case(
        "/note VIP  customer",
        texts.note_saved("VIP  customer"),
        {"topics.note": "VIP  customer"},
        f"{CARD}\n备注：VIP  customer",
    ),
    Case(
        "/unnote",
        texts.note_cleared(),
        {"topics.note": None},
        CARD,
        setup=("/note old note",),
    ),
    Case("/risk", texts.risk_marked(USER_ID), {"users.is_risk": True}, f"{CARD}\n⚠️ 高危用户"),
    Case(
        "/unrisk",
        texts.risk_cleared(USER_ID),
        {"users.is_risk": False},
        CARD,
        setup=("/risk",),
    ),
]
CASE_IDS = [case.text.split()[0] for case in CASES]


def _calls_of(case: Case) -> list[str]:
    return ["sendMessage"] if case.card is None else ["editMessageText", "sendMessage"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_command_changes_its_rows_edits_the_card_and_replies(
    case, webhook, telegram, admin, user, topic
):
    for text in case.setup:
        _send(webhook, telegram, admin, text, thread_id=topic.thread_id)
    before = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, admin, case.text, thread_id=topic.thread_id)

    assert _changes(before, table_state()) == case.changes
    calls = telegram.calls()
    assert [call.method for call in calls] == _calls_of(case)
    assert calls[-1].params == _reply_params(telegram, topic.thread_id, case.reply)
    assert all(call.ok for call in calls)
    if case.card is not None:
        assert calls[0].params == {
            "chat_id": telegram.support_chat_id,
            "message_id": topic.pinned_msg_id,
            "text": case.card,
        }
    assert card_text(telegram, topic) == (case.card or CARD)
    assert topic_texts(telegram, topic.thread_id)[-1] == case.reply
    # A command is never relayed to the user, never ledgered.
    assert dm_texts(telegram, user) == []
    assert RelayedMessage.objects.filter(direction="out").count() == 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_member_gets_admins_only_and_nothing_changes(
    case, webhook, telegram, admin, member, topic
):
    for text in case.setup:
        _send(webhook, telegram, admin, text, thread_id=topic.thread_id)
    before = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, member, case.text, thread_id=topic.thread_id)

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == _reply_params(telegram, topic.thread_id, texts.admins_only())


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_topic_without_binding_gets_the_notice_and_nothing_changes(
    case, webhook, telegram, admin, topic
):
    thread_id = telegram.create_topic_by_hand("made by hand")
    before = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, admin, case.text, thread_id=thread_id)

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == _reply_params(telegram, thread_id, texts.no_binding())


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_in_general_a_topic_command_is_ignored(case, webhook, telegram, admin, topic):
    before = table_state()
    telegram.forget_calls()

    update = _send(webhook, telegram, admin, case.text, thread_id=None)

    assert table_state() == before
    assert telegram.calls() == []
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_repeated_command_changes_nothing_more(case, webhook, telegram, admin, topic):
    for text in case.setup:
        _send(webhook, telegram, admin, text, thread_id=topic.thread_id)
    _send(webhook, telegram, admin, case.text, thread_id=topic.thread_id)
    after_first = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, admin, case.text, thread_id=topic.thread_id)

    assert table_state() == after_first
    calls = telegram.calls()
    assert [call.method for call in calls] == _calls_of(case)
    if case.card is not None:
        assert calls[0].status == 400  # "message is not modified": best effort, logged
    assert calls[-1].params == _reply_params(telegram, topic.thread_id, case.reply)
    assert card_text(telegram, topic) == (case.card or CARD)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_retryable_reply_failure_is_retried_and_converges(
    case, webhook, telegram, admin, topic, clock, inbox
):
    for text in case.setup:
        _send(webhook, telegram, admin, text, thread_id=topic.thread_id)
    before = table_state()
    update = telegram.group_message(admin, thread_id=topic.thread_id, text=case.text)
    telegram.fail("sendMessage", status=500)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it

    assert _changes(before, table_state()) == case.changes  # the database goes first
    after_first = table_state()

    inbox.later(seconds=60)

    assert table_state() == after_first
    assert topic_texts(telegram, topic.thread_id).count(case.reply) == 1
    assert card_text(telegram, topic) == (case.card or CARD)
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


# The commands that make two calls: the card edit (best effort), then the reply.
TWO_CALL_CASES = [
    (case, call_number) for case in CASES if case.card is not None for call_number in (1, 2)
]


@pytest.mark.parametrize(
    ("case", "call_number"),
    TWO_CALL_CASES,
    ids=[f"{case.text.split()[0]}-{number}" for case, number in TWO_CALL_CASES],
)
def test_a_retryable_fault_at_either_call_converges_on_retry(
    case: Case,
    call_number: int,
    webhook: Webhook,
    telegram: FakeTelegram,
    admin: FakeUser,
    user: FakeUser,
    topic: Topic,
    clock: Clock,
    inbox: Inbox,
) -> None:
    for text in case.setup:
        _send(webhook, telegram, admin, text, thread_id=topic.thread_id)
    before = table_state()
    card_before = card_text(telegram, topic)
    update = telegram.group_message(admin, thread_id=topic.thread_id, text=case.text)
    telegram.forget_calls()
    telegram.fail_call(call_number, status=500)

    webhook.deliver_ok(update)
    card_edit = call_number == 1
    # The card edit is best effort (spec §2.7): its fault is logged and the update is done at
    # once, the card keeping its old text; a fault of the reply leaves it to the worker.
    assert inbox.waiting() == ([] if card_edit else [update["update_id"]])
    inbox.later(seconds=60)
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"
    assert _changes(before, table_state()) == case.changes
    assert topic_texts(telegram, topic.thread_id).count(case.reply) == 1
    assert card_text(telegram, topic) == (card_before if card_edit else case.card)
    assert dm_texts(telegram, user) == []


# ------------------------------------------------------------------ what each one means


def test_ban_voids_a_pending_challenge_in_the_same_statement(webhook, telegram, admin, clock):
    person = telegram.user(7002, "Eve")
    webhook.deliver_ok(telegram.private_message(person, text="hi"))  # welcome + challenge
    thread_id = telegram.create_topic_by_hand("Eve")
    Topic.objects.create(
        bot_id=telegram.bot.id,
        user_id=person.id,
        thread_id=thread_id,
        title="Eve",
        created_at=clock.now,
    )
    assert BotUser.objects.get(user_id=person.id).verify_request_hash is not None

    _send(webhook, telegram, admin, "/ban", thread_id=thread_id)

    row = BotUser.objects.get(user_id=person.id)
    assert row.is_banned is True
    assert (
        row.verify_answer,
        row.verify_msg_id,
        row.verify_request_hash,
        row.verify_request_expires_at,
        row.verify_request_generation,
        row.verify_submit_not_before,
    ) == (None, None, None, None, None, None)


def test_a_banned_user_is_muted_and_after_unban_meets_the_gates_again(
    webhook, telegram, admin, user, topic, clock
):
    BotUser.objects.filter(user_id=user.id).update(is_verified=False, verified_at=None)
    _send(webhook, telegram, admin, "/ban", thread_id=topic.thread_id)
    relayed = len(topic_texts(telegram, topic.thread_id))

    webhook.deliver_ok(telegram.private_message(user, text="anyone?"))

    assert dm_texts(telegram, user) == [texts.ban_notice()]
    assert len(topic_texts(telegram, topic.thread_id)) == relayed

    _send(webhook, telegram, admin, "/unban", thread_id=topic.thread_id)
    clock.advance(seconds=61)
    webhook.deliver_ok(telegram.private_message(user, text="back"))

    # Unbanned, but unverified: the verification gate comes next (nothing was restored).
    [notice, challenge] = telegram.bot_messages(user.id)
    assert notice.text == texts.ban_notice()
    assert challenge.text.startswith("为了确认你是真人")
    assert "back" not in topic_texts(telegram, topic.thread_id)


def test_a_closed_binding_still_takes_commands(webhook, telegram, admin, user, topic):
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    telegram.forget_calls()

    _send(webhook, telegram, admin, "/ban", thread_id=topic.thread_id)

    assert BotUser.objects.get(user_id=user.id).is_banned is True
    # The closed topic refuses the reply (TOPIC_CLOSED): it goes to General, naming the topic
    # (issue 36; the original's was lost).
    assert [(call.params.get("message_thread_id"), call.status) for call in telegram.calls()] == [
        (topic.thread_id, 400),
        (None, 200),
    ]
    assert general_texts(telegram) == [
        texts.closed_topic_reply(topic.thread_id, texts.user_banned(user.id))
    ]


def test_the_bot_suffix_is_accepted(webhook, telegram, admin, user, topic):
    _send(webhook, telegram, admin, "/risk@hodor_test_bot", thread_id=topic.thread_id)

    assert BotUser.objects.get(user_id=user.id).is_risk is True


def test_a_note_is_cut_at_500_code_points(webhook, telegram, admin, topic):
    note = "😀" + "测" * 498 + "ab"  # 501 code points (the emoji is 2 UTF-16 units)

    _send(webhook, telegram, admin, f"/note {note}", thread_id=topic.thread_id)

    stored = Topic.objects.get().note
    assert stored == note[:500]
    assert len(stored) == 500
    assert topic_texts(telegram, topic.thread_id)[-1] == texts.note_saved(note[:500])


def test_note_without_text_gets_the_usage_before_any_binding_lookup(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("made by hand")

    _send(webhook, telegram, admin, "/note   ", thread_id=thread_id)

    assert topic_texts(telegram, thread_id) == [texts.note_usage()]
    assert Topic.objects.count() == 0


def test_a_failed_card_edit_does_not_stop_the_note(webhook, telegram, admin, topic):
    telegram.fail("editMessageText", status=500)

    _send(webhook, telegram, admin, "/note kept anyway", thread_id=topic.thread_id)

    assert Topic.objects.get().note == "kept anyway"
    assert topic_texts(telegram, topic.thread_id)[-1] == texts.note_saved("kept anyway")
    assert card_text(telegram, topic) == CARD


def test_risk_resets_the_reminder_window(webhook, telegram, admin, user, topic, clock):
    _send(webhook, telegram, admin, "/risk", thread_id=topic.thread_id)
    webhook.deliver_ok(telegram.private_message(user, text="first"))
    reminder = texts.risk_reminder("Dave (@dave)")
    assert topic_texts(telegram, topic.thread_id)[-2:] == ["first", reminder]
    assert BotUser.objects.get(user_id=user.id).risk_notice_at == clock.now

    clock.advance(minutes=5)
    _send(webhook, telegram, admin, "/risk", thread_id=topic.thread_id)
    assert BotUser.objects.get(user_id=user.id).risk_notice_at is None
    webhook.deliver_ok(telegram.private_message(user, text="second"))

    # Marked again: the next message is reminded about at once, not 24 h later.
    assert topic_texts(telegram, topic.thread_id)[-2:] == ["second", reminder]

    _send(webhook, telegram, admin, "/unrisk", thread_id=topic.thread_id)
    webhook.deliver_ok(telegram.private_message(user, text="third"))
    assert topic_texts(telegram, topic.thread_id)[-1] == "third"


# ------------------------------------------------------------------ /help, unknown, not yet


HELP_ON_MATH = """管理命令（在用户的话题中使用）：
/help — 查看本帮助
/ban — 禁言该用户
/unban — 解除禁言
/note <文字> — 设置备注（显示在置顶信息中）
/unnote — 清除备注
/risk — 标记为高危用户
/unrisk — 取消高危标记
/broadcast <标题> — 向全部用户发送公告（在 General 中使用；正文从第二行起，先预览再确认）
/archive — 归档会话：关闭话题并清除验证，资料和记录保留
/deluser — 彻底删除该用户的数据（需二次确认）
/purgemsg — 删除话题内已记录的消息

人机验证：
/verifyoff — 关闭验证
/verifymode — 查看验证方式（当前：算术题）
/verifymode_math — 切换为算术题
/verifymode_button — 切换为纯按钮
/verifymode_turnstile — 切换为 Turnstile 网页验证
验证设置命令只能在 General 中使用；也可以写成 /verifymode math|button|turnstile。
⚠️ 纯按钮验证很弱，机器人也能点击通过。

危险操作：
/wipealldata — 清空全部话题与数据（需二次确认）

以 / 开头的消息不会转发给用户。"""


def test_help_in_a_topic_is_the_full_list(webhook, telegram, admin, topic):
    telegram.forget_calls()

    _send(webhook, telegram, admin, "/help", thread_id=topic.thread_id)

    [call] = telegram.calls()
    assert call.params == _reply_params(telegram, topic.thread_id, HELP_ON_MATH)


def test_help_needs_no_binding_and_works_in_general_without_thread(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("made by hand")
    _send(webhook, telegram, admin, "/help", thread_id=thread_id)
    assert topic_texts(telegram, thread_id) == [HELP_ON_MATH]
    telegram.forget_calls()

    _send(webhook, telegram, admin, "/help@hodor_test_bot", thread_id=None)

    [call] = telegram.calls()
    assert call.params == {"chat_id": telegram.support_chat_id, "text": HELP_ON_MATH}
    assert general_texts(telegram) == [HELP_ON_MATH]


def test_help_reflects_the_switches(webhook, telegram, admin, topic):
    set_switches(verify_enabled="0", verify_mode="button")

    _send(webhook, telegram, admin, "/help", thread_id=topic.thread_id)

    text = topic_texts(telegram, topic.thread_id)[-1]
    assert text == texts.help_text(verification_enabled=False, mode="button")
    assert "/verifyon — 开启验证\n当前验证已关闭。\n" in text
    assert "/verifyoff" not in text
    assert "/verifymode — 查看验证方式（当前：纯按钮）" in text


@pytest.mark.parametrize(
    "text", ["/foo", "/", "/start", "/HELP", "/Ban", "/bans", "/verifymodes", "/ban_user"]
)
def test_unknown_commands_get_the_hint(text, webhook, telegram, admin, topic):
    before = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, admin, text, thread_id=topic.thread_id)

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == _reply_params(telegram, topic.thread_id, texts.unknown_command())


def test_broadcast_in_a_topic_points_to_general_and_changes_nothing(
    webhook, telegram, admin, topic
):
    before = table_state()
    telegram.forget_calls()

    _send(webhook, telegram, admin, "/broadcast Title\nbody", thread_id=topic.thread_id)

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params == _reply_params(telegram, topic.thread_id, texts.broadcast_in_general())


def test_help_lists_exactly_the_commands_that_are_routed():
    listed = {
        line.split(" ", 1)[0]
        for enabled in (True, False)
        for line in texts.help_text(verification_enabled=enabled, mode="math").splitlines()
        if line.startswith("/")
    }

    # /broadcast has a pipeline of its own in General (tests/bots/broadcast/).
    routed = set(ANYWHERE) | set(ANY_TOPIC) | set(GENERAL_ONLY) | set(ABOUT_THE_TOPIC_USER)
    assert listed == routed | {"/broadcast"}


def test_every_topic_command_is_routed():
    assert set(ABOUT_THE_TOPIC_USER) == {
        "/ban",
        "/unban",
        "/note",
        "/unnote",
        "/risk",
        "/unrisk",
        "/archive",
        "/deluser",
        "/purgemsg",
    }


def test_a_user_row_missing_behind_a_binding_gets_the_notice(webhook, telegram, admin, clock):
    person = telegram.user(7003, "Gone")
    make_user(person, bot_id=telegram.bot.id, now=clock.now)
    thread_id = telegram.create_topic_by_hand("Gone")
    Topic.objects.create(
        bot_id=telegram.bot.id, user_id=person.id, thread_id=thread_id, title="Gone"
    )
    BotUser.objects.filter(user_id=person.id).delete()

    _send(webhook, telegram, admin, "/ban", thread_id=thread_id)

    assert topic_texts(telegram, thread_id) == [texts.no_binding()]
    assert BotUser.objects.count() == 0


@pytest.mark.parametrize(
    ("text", "where", "reply"),
    [
        ("/help", "topic", lambda: HELP_ON_MATH),
        ("/help", "general", lambda: HELP_ON_MATH),
        ("/nothing", "topic", texts.unknown_command),
        ("/note", "topic", texts.note_usage),
        ("/ban", "unbound", texts.no_binding),
        ("/verifyon", "topic", texts.use_in_general),
        ("/broadcast x\ny", "topic", texts.broadcast_in_general),
    ],
)
def test_a_failed_answer_is_sent_once_after_the_wait_telegram_asked_for(
    text, where, reply, webhook, telegram, admin, topic, clock, inbox
):
    thread_id = {
        "topic": topic.thread_id,
        "general": None,
        "unbound": telegram.create_topic_by_hand("by hand"),
    }[where]
    before = table_state()
    update = telegram.group_message(admin, thread_id=thread_id, text=text)
    telegram.fail("sendMessage", status=429, retry_after=30)

    webhook.deliver_ok(update)  # stored: the inbox's worker sends it after the 30 s
    assert inbox.later(seconds=29) == 0
    clock.limiter_forgets(seconds=30)  # the limiter learned the 30 s too
    assert inbox.later(seconds=1) == 1

    assert table_state() == before
    sent = [call for call in telegram.calls("sendMessage") if call.ok]
    assert [call.params["text"] for call in sent[-1:]] == [reply()]
    if where == "general":
        assert general_texts(telegram) == [reply()]
    else:
        assert topic_texts(telegram, thread_id).count(reply()) == 1
