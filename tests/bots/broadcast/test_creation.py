"""/broadcast in General (spec §7.1, §7.2, §7.4): parsing, the announcement, eligibility, the
preview and the control message — against the fake Bot API. Nothing reaches a user here."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bots import texts
from bots.models import Bot, BotUser, Broadcast, ProcessedUpdate, Topic
from tests.bots.broadcast.helpers import (
    ANNOUNCEMENT_HTML,
    ANNOUNCEMENT_TEXT,
    TITLE_AND_BODY,
    control_of,
    eligible_users,
    general_messages,
    start_draft,
)
from tests.bots.helpers import general_texts, keyboard_data


def _general(webhook, telegram, who, text: str) -> None:
    webhook.deliver_ok(telegram.group_message(who, thread_id=None, text=text))


def _user_messages(telegram, people) -> list:
    return [message for person in people for message in telegram.bot_messages(person.id)]


def test_the_command_posts_the_preview_and_its_control_message(
    webhook, telegram, admin, people, clock
):
    telegram.bot.first_name = "Hodor Support"
    telegram.forget_calls()

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    html = ANNOUNCEMENT_HTML.replace("— Hodor", "— Hodor Support")
    getme, preview_call, control_call = telegram.calls()
    assert getme.method == "getMe"
    assert preview_call.params == {
        "chat_id": telegram.support_chat_id,
        "text": html,
        "parse_mode": "HTML",
    }
    [broadcast] = Broadcast.objects.all()
    preview, control = general_messages(telegram)
    assert control_call.params == {
        "chat_id": telegram.support_chat_id,
        "text": texts.broadcast_control(3),
        "reply_markup": {
            "inline_keyboard": [
                [
                    {"text": "确认发送", "callback_data": f"b:y:{broadcast.id}"},
                    {"text": "取消", "callback_data": f"b:n:{broadcast.id}"},
                ]
            ]
        },
        "reply_parameters": {"message_id": preview.message_id},
    }
    assert preview.text == ANNOUNCEMENT_TEXT.replace("— Hodor", "— Hodor Support")
    assert control.reply_to_message_id == preview.message_id
    assert control.text == (
        "📋 广播确认（尚未发送）\n预计收件人：3\n"
        "请在 5 分钟内确认，超时作废；只有发起的管理员可以操作。"
    )
    assert (
        broadcast.status,
        broadcast.message_html,
        broadcast.initiator_user_id,
        broadcast.support_chat_id,
        broadcast.preview_msg_id,
        broadcast.control_msg_id,
        broadcast.recipient_ids_json,
        broadcast.expected_count,
        broadcast.expires_at,
    ) == (
        "pending",
        html,
        admin.id,
        telegram.support_chat_id,
        preview.message_id,
        control.message_id,
        "[]",
        0,
        clock.now + timedelta(minutes=5),
    )
    # getMe refreshed the bots row; no user received anything yet.
    assert Bot.objects.get().display_name == "Hodor Support"
    assert _user_messages(telegram, people) == []


def test_markup_an_admin_types_shows_literally(webhook, telegram, admin, people):
    _general(webhook, telegram, admin, "/broadcast <b>Sale</b> & *more*\nUse <i>code</i> _x_ &amp;")

    preview = general_messages(telegram)[0]
    assert preview.html == (
        "<b>📣 &lt;b&gt;Sale&lt;/b&gt; &amp; *more*</b>\n\n"
        "Use &lt;i&gt;code&lt;/i&gt; _x_ &amp;amp;\n\n<i>— Hodor</i>"
    )
    assert preview.text == "📣 <b>Sale</b> & *more*\n\nUse <i>code</i> _x_ &amp;\n\n— Hodor"


def test_a_bot_without_a_first_name_signs_hodor(webhook, telegram, admin, people):
    telegram.bot.first_name = "   "

    _general(webhook, telegram, admin, "/broadcast T\nB")

    assert general_messages(telegram)[0].text == "📣 T\n\nB\n\n— Hodor"


@pytest.mark.parametrize(
    ("text", "title", "body"),
    [
        ("/broadcast@hodor_test_bot  Big news \n body ", "Big news", "body"),
        ("/broadcast T\r\nline 1\r\n\r\nline 2\r", "T", "line 1\n\nline 2"),
        ("/broadcast T\rline 1\r\rline 2", "T", "line 1\n\nline 2"),
        (
            "/broadcast Title with  inner  spaces\n\n\n  Body\n\n  kept  \n\n",
            "Title with  inner  spaces",
            "Body\n\n  kept",
        ),
    ],
)
def test_title_and_body_are_split_as_the_original_does(
    text, title, body, webhook, telegram, admin, people
):
    _general(webhook, telegram, admin, text)

    assert general_messages(telegram)[0].text == f"📣 {title}\n\n{body}\n\n— Hodor"


@pytest.mark.parametrize(
    "text",
    [
        "/broadcast",
        "/broadcast Title",
        "/broadcast Title\n   \n ",
        "/broadcast\nbody only",
        "/broadcast   \nbody",
    ],
)
def test_an_empty_title_or_body_gets_the_usage_and_nothing_else(
    text, webhook, telegram, admin, people
):
    telegram.forget_calls()

    _general(webhook, telegram, admin, text)

    [call] = telegram.calls()
    assert call.params == {"chat_id": telegram.support_chat_id, "text": texts.broadcast_usage()}
    assert Broadcast.objects.count() == 0


def test_a_member_who_is_not_an_admin_is_told_so_and_nothing_else_happens(
    webhook, telegram, member, people
):
    telegram.forget_calls()

    _general(webhook, telegram, member, TITLE_AND_BODY)

    [call] = telegram.calls()
    assert call.params == {"chat_id": telegram.support_chat_id, "text": texts.admins_only()}
    assert Broadcast.objects.count() == 0


def _body_of_visible_length(length: int) -> str:
    """A body that makes the visible text exactly ``length`` UTF-16 units long (title "T",
    signature "Hodor"), with emoji that count two units each."""
    fixed = len("📣 T\n\n\n\n— Hodor".encode("utf-16-le")) // 2
    emoji = 100
    return "😀" * emoji + "x" * (length - fixed - 2 * emoji)


def test_the_visible_text_may_hold_4096_utf16_units_and_not_one_more(
    webhook, telegram, admin, people
):
    _general(webhook, telegram, admin, "/broadcast T\n" + _body_of_visible_length(4097))

    assert general_texts(telegram) == [texts.broadcast_too_long(4097)]
    assert general_texts(telegram) == [
        "公告太长：可见文字共 4097 个字符（按 UTF-16 计），超过 Telegram 的 4096 上限，"
        "未创建广播。请缩短后重试。"
    ]
    assert Broadcast.objects.count() == 0

    _general(webhook, telegram, admin, "/broadcast T\n" + _body_of_visible_length(4096))

    # Telegram (the fake counts like it) accepted the 4096-unit preview: never truncated.
    preview = general_messages(telegram)[1]
    assert len(preview.text.encode("utf-16-le")) // 2 == 4096
    assert Broadcast.objects.get().status == "pending"


def test_getme_failing_for_now_leaves_the_update_for_the_worker(
    webhook, telegram, admin, people, clock, inbox
):
    update = telegram.group_message(admin, thread_id=None, text=TITLE_AND_BODY)
    telegram.fail("getMe", status=502)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert Broadcast.objects.count() == 0
    assert general_messages(telegram) == []

    inbox.later(seconds=60)

    assert Broadcast.objects.get().status == "pending"
    assert len(general_messages(telegram)) == 2


def test_getme_refused_is_reported_and_nothing_is_created(webhook, telegram, admin, people):
    telegram.fail("getMe", status=401, description="Unauthorized")

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [texts.broadcast_bot_name_failed()]
    assert Broadcast.objects.count() == 0


def test_eligibility_counts_bound_unbanned_users_whatever_their_state(
    webhook, telegram, admin, clock
):
    bot_id = telegram.bot.id
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6101])  # plain
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6102], status="deleted")
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6103], is_verified=False)
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6104])
    Topic.objects.filter(user_id=6104).update(status="closed", closed_at=clock.now)
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6105], is_banned=True)
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6106])
    Topic.objects.filter(user_id=6106).delete()  # no binding
    eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=[6107])
    BotUser.objects.filter(user_id=6107).delete()  # an orphan binding

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert control_of(telegram).message.text == texts.broadcast_control(4)


def test_nobody_eligible_creates_nothing(webhook, telegram, admin, clock):
    eligible_users(telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=[6201], is_banned=True)

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [texts.broadcast_no_recipients()]
    assert Broadcast.objects.count() == 0


def test_more_eligible_users_than_the_cap_creates_nothing(
    webhook, telegram, admin, people, bot_settings
):
    bot_settings.BROADCAST_MAX_RECIPIENTS = "2"

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [texts.broadcast_too_many(2)]
    assert general_texts(telegram) == ["符合条件的用户超过 2 人，未创建广播。"]
    assert Broadcast.objects.count() == 0

    bot_settings.BROADCAST_MAX_RECIPIENTS = "3"  # exactly the cap is fine
    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert control_of(telegram).message.text == texts.broadcast_control(3)


def test_the_default_cap_is_500(webhook, telegram, admin, clock):
    eligible_users(telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(10_001, 10_502))

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [texts.broadcast_too_many(500)]


def test_a_second_draft_is_refused_while_one_awaits_confirmation(webhook, telegram, admin, people):
    first = start_draft(webhook, telegram, admin)
    telegram.forget_calls()

    _general(webhook, telegram, admin, "/broadcast Another\nbody")

    assert [call.method for call in telegram.calls()] == ["getMe", "sendMessage"]
    assert general_texts(telegram)[-1] == texts.broadcast_draft_exists()
    assert list(Broadcast.objects.values_list("id", "status")) == [(first.broadcast_id, "pending")]


def test_a_draft_may_be_prepared_while_another_broadcast_is_sending(
    webhook, telegram, admin, people, clock
):
    sending = Broadcast.objects.create(
        bot_id=telegram.bot.id,
        source_update_id=1,
        initiator_user_id=admin.id,
        support_chat_id=telegram.support_chat_id,
        message_html="<b>earlier</b>",
        status="sending",
        expires_at=clock.now,
        updated_at=clock.now,
    )

    control = start_draft(webhook, telegram, admin)

    assert dict(Broadcast.objects.values_list("id", "status")) == {
        sending.id: "sending",
        control.broadcast_id: "pending",
    }


def test_a_command_retried_after_the_control_message_failed_sends_only_that(
    webhook, telegram, admin, people, clock, inbox
):
    update = telegram.group_message(admin, thread_id=None, text=TITLE_AND_BODY)
    telegram.fail_call(3, status=500)  # getMe, the preview, then the control message

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    [broadcast] = Broadcast.objects.all()
    assert (broadcast.status, broadcast.control_msg_id) == ("preparing", None)
    [preview] = general_messages(telegram)
    assert broadcast.preview_msg_id == preview.message_id

    inbox.later(seconds=60)

    preview_again, control = general_messages(telegram)
    assert preview_again.message_id == preview.message_id  # no second preview
    assert control.reply_to_message_id == preview.message_id
    broadcast.refresh_from_db()
    assert (broadcast.status, broadcast.control_msg_id) == ("pending", control.message_id)


def test_a_command_whose_broadcast_went_on_does_nothing_when_it_comes_again(
    webhook, telegram, admin, people
):
    update = telegram.group_message(admin, thread_id=None, text=TITLE_AND_BODY)
    webhook.deliver_ok(update)
    # The claim was lost (say the database restored a backup): Telegram delivers it again.
    ProcessedUpdate.objects.all().delete()
    telegram.forget_calls()

    webhook.deliver_ok(update)

    assert [call.method for call in telegram.calls()] == ["getMe"]
    assert Broadcast.objects.get().status == "pending"


def test_a_refused_preview_deletes_the_draft_and_says_so(webhook, telegram, admin, people):
    telegram.fail_call(2, status=400, description="Bad Request: not enough rights to send text")

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [texts.broadcast_preview_failed()]
    assert Broadcast.objects.count() == 0


def test_a_refused_control_message_deletes_the_draft_and_says_so(webhook, telegram, admin, people):
    telegram.fail_call(3, status=400, description="Bad Request: message to be replied not found")

    _general(webhook, telegram, admin, TITLE_AND_BODY)

    assert general_texts(telegram) == [ANNOUNCEMENT_TEXT, texts.broadcast_control_failed()]
    assert Broadcast.objects.count() == 0


def test_the_buttons_carry_the_broadcast_id_within_telegrams_64_bytes(
    webhook, telegram, admin, people
):
    control = start_draft(webhook, telegram, admin)

    assert keyboard_data(control.message) == [
        f"b:y:{control.broadcast_id}",
        f"b:n:{control.broadcast_id}",
    ]


def test_an_english_bot_prepares_in_english(webhook, telegram, admin, people, settings):
    settings.BOT_LANGUAGE = "en"

    control = start_draft(webhook, telegram, admin)

    assert control.message.text == (
        "📋 Broadcast confirmation (not sent yet)\nExpected recipients: 3\n"
        "Confirm within 5 minutes or it is void; only the admin who started it can act."
    )
    assert [button["text"] for button in control.message.reply_markup["inline_keyboard"][0]] == [
        "Confirm and send",
        "Cancel",
    ]
