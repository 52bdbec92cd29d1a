"""The operators' console for deleting (Django admin, through the test client): the user's JSON
export, "delete user" behind a confirmation page and "purge messages" on a topic — the same code
and the same end state as /deluser and /purgemsg, never skipping Telegram."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from bots import texts
from bots.models import BotUser, DeleteConfirmation, RelayedMessage, Topic
from proxy.services.admin_users import admin_user_create_default
from tests.bots.conftest import START
from tests.bots.helpers import click_in_group, keyboard_data, open_conversation, topic_texts
from tests.bots.test_bot_id_filter import _names_the_bot, _touches_business_table

USERS = reverse("admin:bots_botuserlisting_changelist")
ANN, BEN = 7801, 7802


@pytest.fixture
def operator(client, db):
    """The test client, logged in as the (single) admin of the console."""
    client.force_login(
        admin_user_create_default(password="a long operator passphrase 7", now=START)
    )
    return client


@pytest.fixture
def conversations(webhook, telegram, admin, clock) -> dict[int, Topic]:
    """Ann and Ben, each with a topic, a card, one message of theirs and one answer; a note."""
    topics = {}
    for user_id, name in ((ANN, "Ann"), (BEN, "Ben")):
        person = telegram.user(user_id, name, username=name.lower())
        topic = open_conversation(webhook, telegram, person, bot_id=telegram.bot.id, now=clock.now)
        webhook.deliver_ok(
            telegram.group_message(admin, thread_id=topic.thread_id, text=f"hello {name}")
        )
        topics[user_id] = Topic.objects.get(user_id=user_id)
    Topic.objects.filter(user_id=ANN).update(note="wants her data")
    clock.advance(minutes=10)
    return topics


def _delete_url(user_id: int) -> str:
    return reverse("admin:bots_botuserlisting_delete_user", args=[user_id])


def _export_url(user_id: int) -> str:
    return reverse("admin:bots_botuserlisting_export", args=[user_id])


def _purge_url(thread_id: int) -> str:
    return reverse("admin:bots_topiclisting_purge", args=[thread_id])


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _rows_of(user_id: int) -> dict:
    return {
        "users": BotUser.objects.filter(user_id=user_id).count(),
        "topics": Topic.objects.filter(user_id=user_id).count(),
        "messages": RelayedMessage.objects.filter(user_id=user_id).count(),
        "prompts": DeleteConfirmation.objects.filter(user_id=user_id).count(),
    }


NONE_LEFT = {"users": 0, "topics": 0, "messages": 0, "prompts": 0}


def test_the_user_page_offers_the_export_and_the_delete(operator, conversations):
    page = operator.get(reverse("admin:bots_botuserlisting_change", args=[ANN]))

    assert page.status_code == 200
    html = page.content.decode()
    assert f'href="{_export_url(ANN)}">Export data (JSON)</a>' in html
    assert f'href="{_delete_url(ANN)}" class="deletelink">Delete user…</a>' in html


def test_the_confirmation_page_shows_what_goes_and_deletes_nothing(
    operator, telegram, conversations
):
    telegram.forget_calls()

    page = operator.get(_delete_url(ANN))

    assert page.status_code == 200
    html = page.content.decode()
    thread_id = conversations[ANN].thread_id
    assert f"the forum topic {thread_id} (“Ann”) in the support group" in html
    assert "and its note (“wants her data”)" in html
    assert "2 ledger rows (message ids, not contents)" in html
    assert f'<a href="{_export_url(ANN)}">download this user\'s data as JSON</a>' in html
    assert 'value="Yes, delete this user"' in html
    assert telegram.calls() == []
    assert _rows_of(ANN) == {"users": 1, "topics": 1, "messages": 2, "prompts": 0}


def test_the_export_holds_profile_topic_note_and_ledger(operator, telegram, conversations, clock):
    topic = conversations[ANN]
    ledger = list(RelayedMessage.objects.filter(user_id=ANN).order_by("id"))

    response = operator.get(_export_url(ANN))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="hodor-user-{ANN}.json"'
    assert json.loads(response.content) == {
        "format": "hodor-user-export/1",
        "exported_at": "2026-10-01T12:10:00Z",
        "bot_id": telegram.bot.id,
        "user": {
            "user_id": ANN,
            "first_name": "Ann",
            "last_name": "",
            "username": "ann",
            "status": "active",
            "is_banned": False,
            "is_risk": False,
            "is_verified": True,
            "verified_at": "2026-10-01T12:00:00Z",
            "first_seen_at": "2026-10-01T12:00:00Z",
            "last_seen_at": "2026-10-01T12:00:00Z",
        },
        "topic": {
            "thread_id": topic.thread_id,
            "title": "Ann",
            "status": "open",
            "note": "wants her data",
            "pinned_msg_id": topic.pinned_msg_id,
            "created_at": "2026-10-01T12:00:00Z",
            "closed_at": None,
        },
        "messages": [
            {
                "id": ledger[0].id,
                "thread_id": topic.thread_id,
                "direction": "in",
                "content_type": "text",
                "group_msg_id": ledger[0].group_msg_id,
                "private_msg_id": ledger[0].private_msg_id,
                "created_at": "2026-10-01T12:00:00Z",
            },
            {
                "id": ledger[1].id,
                "thread_id": topic.thread_id,
                "direction": "out",
                "content_type": "text",
                "group_msg_id": ledger[1].group_msg_id,
                "private_msg_id": ledger[1].private_msg_id,
                "created_at": "2026-10-01T12:00:00Z",
            },
        ],
    }


def test_delete_user_ends_as_the_command_ends(
    operator, webhook, telegram, admin, conversations, clock
):
    ann_topic, ben_topic = conversations[ANN], conversations[BEN]
    # Ben goes the Telegram way: /deluser and its confirm button.
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=ben_topic.thread_id, text="/deluser")
    )
    confirm, _ = keyboard_data(telegram.topic_messages(ben_topic.thread_id)[-1])
    prompt_id = telegram.topic_messages(ben_topic.thread_id)[-1].message_id
    click_in_group(webhook, telegram, admin, prompt_id, confirm)
    telegram.forget_calls()

    # Ann goes the console way.
    response = operator.post(_delete_url(ANN), follow=True)

    assert response.redirect_chain == [(USERS, 302)]
    assert _messages(response) == [
        f"Deleted user {ANN} (topic {ann_topic.thread_id} deleted in Telegram): profile, binding,"
        " note and ledger rows. Their private chat with the bot is untouched."
    ]
    assert [(call.method, call.params) for call in telegram.calls()] == [
        (
            "deleteForumTopic",
            {"chat_id": telegram.support_chat_id, "message_thread_id": ann_topic.thread_id},
        )
    ]
    for user_id, topic in ((ANN, ann_topic), (BEN, ben_topic)):
        assert _rows_of(user_id) == NONE_LEFT
        assert telegram.topic(topic.thread_id).deleted is True
    assert operator.get(_export_url(ANN)).status_code == 404
    assert operator.get(_delete_url(ANN)).status_code == 404


def test_a_user_without_a_topic_is_deleted_from_the_database_only(operator, telegram, webhook):
    stranger = telegram.user(7803, "Cleo")
    webhook.deliver_ok(telegram.private_message(stranger, text="hi"))  # unverified: no topic
    telegram.forget_calls()

    response = operator.post(_delete_url(7803), follow=True)

    assert _messages(response) == [
        "Deleted user 7803 (no topic): profile, binding, note and ledger rows. Their private chat"
        " with the bot is untouched."
    ]
    assert telegram.calls() == []
    assert _rows_of(7803) == NONE_LEFT


def test_nothing_is_deleted_when_telegram_refuses_or_is_not_configured(
    operator, telegram, conversations, bot_settings
):
    thread_id = conversations[ANN].thread_id
    telegram.make_topic_undeletable(thread_id)
    page = reverse("admin:bots_botuserlisting_change", args=[ANN])

    refused = operator.post(_delete_url(ANN), follow=True)
    telegram.fail("deleteForumTopic", status=502)
    unanswered = operator.post(_delete_url(ANN), follow=True)
    bot_settings.TELEGRAM_BOT_TOKEN = None
    unconfigured = operator.post(_delete_url(ANN), follow=True)

    assert [response.redirect_chain for response in (refused, unanswered, unconfigured)] == [
        [(page, 302)]
    ] * 3
    assert _messages(refused) == [
        f"Nothing deleted: Telegram refused to delete topic {thread_id} (check the bot's rights"
        " in the group)."
    ]
    assert _messages(unanswered) == [
        "Nothing deleted: Telegram did not answer (deleteForumTopic HTTP 502: Bad Gateway). Try"
        " again."
    ]
    assert _messages(unconfigured) == [
        "Nothing deleted: the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)."
    ]
    assert _rows_of(ANN) == {"users": 1, "topics": 1, "messages": 2, "prompts": 0}
    assert telegram.topic(thread_id).deleted is False


def test_the_delete_is_a_post_with_the_csrf_token(conversations, db):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(
        admin_user_create_default(password="a long operator passphrase 7", now=START)
    )

    forged = strict.post(_delete_url(ANN))

    assert forged.status_code == 403
    assert _rows_of(ANN)["users"] == 1
    page = strict.get(_delete_url(ANN))
    token = page.context["csrf_token"]
    assert strict.post(_delete_url(ANN), {"csrfmiddlewaretoken": str(token)}).status_code == 302
    assert _rows_of(ANN) == NONE_LEFT


def test_purge_messages_ends_as_the_command_ends(operator, webhook, telegram, admin, conversations):
    ann_topic, ben_topic = conversations[ANN], conversations[BEN]
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=ben_topic.thread_id, text="/purgemsg")
    )
    ann_targets = sorted(
        [
            ann_topic.pinned_msg_id,
            *RelayedMessage.objects.filter(user_id=ANN).values_list("group_msg_id", flat=True),
        ]
    )

    page = operator.get(_purge_url(ann_topic.thread_id))
    response = operator.post(_purge_url(ann_topic.thread_id), follow=True)

    assert page.status_code == 200
    assert "the 2 tracked messages" in page.content.decode()
    report = "\n".join([texts.purge_done(3), texts.purge_card_pinned()])
    topic_page = reverse("admin:bots_topiclisting_change", args=[ann_topic.thread_id])
    assert response.redirect_chain == [(topic_page, 302)]
    assert _messages(response) == [f"Purged (report posted in the topic): {report}"]
    deleted = [call.params["message_id"] for call in telegram.calls("deleteMessage")]
    assert deleted[-3:] == ann_targets
    for topic in (ann_topic, ben_topic):
        card = Topic.objects.get(thread_id=topic.thread_id).pinned_msg_id
        assert RelayedMessage.objects.filter(thread_id=topic.thread_id).count() == 0
        assert card not in (None, topic.pinned_msg_id)
        assert topic_texts(telegram, topic.thread_id)[-1] == report
    assert telegram.pinned() == [
        Topic.objects.get(thread_id=ben_topic.thread_id).pinned_msg_id,
        Topic.objects.get(thread_id=ann_topic.thread_id).pinned_msg_id,
    ]


def test_purge_is_not_started_without_telegram(operator, telegram, conversations, bot_settings):
    thread_id = conversations[ANN].thread_id
    bot_settings.SUPPORT_CHAT_ID = "not a chat"

    response = operator.post(_purge_url(thread_id), follow=True)

    assert _messages(response) == [
        "Nothing purged: the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)."
    ]
    assert RelayedMessage.objects.filter(thread_id=thread_id).count() == 2
    assert telegram.calls("deleteMessage") == []


def test_unknown_rows_are_not_found(operator, conversations):
    assert operator.get(_delete_url(9999)).status_code == 404
    assert operator.get(_export_url(9999)).status_code == 404
    assert operator.get(_purge_url(9999)).status_code == 404
    assert operator.get(_export_url("x1")).status_code == 404


def test_every_statement_of_the_deleting_tools_names_the_bot(
    operator, webhook, telegram, admin, conversations, clock
):
    ben_topic = conversations[BEN]
    with CaptureQueriesContext(connection) as captured:
        operator.get(_export_url(ANN))
        operator.get(_delete_url(ANN))
        operator.post(_purge_url(conversations[ANN].thread_id))
        operator.post(_delete_url(ANN))
        webhook.deliver_ok(
            telegram.group_message(admin, thread_id=ben_topic.thread_id, text="/purgemsg")
        )
        webhook.deliver_ok(
            telegram.group_message(admin, thread_id=ben_topic.thread_id, text="/deluser")
        )
        prompt = telegram.topic_messages(ben_topic.thread_id)[-1]
        confirm, cancel = keyboard_data(prompt)
        click_in_group(webhook, telegram, admin, prompt.message_id, cancel)
        webhook.deliver_ok(
            telegram.group_message(admin, thread_id=ben_topic.thread_id, text="/wipealldata")
        )
        wipe = telegram.topic_messages(ben_topic.thread_id)[-1]
        click_in_group(webhook, telegram, admin, wipe.message_id, keyboard_data(wipe)[0])

    business = [query["sql"] for query in captured if _touches_business_table(query["sql"])]
    assert len(business) > 30
    assert [sql for sql in business if not _names_the_bot(sql)] == []
    assert BotUser.objects.count() == 0  # the wipe ran to the end
