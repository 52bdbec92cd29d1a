"""The operators' console over the bot's tables (Django admin), driven with the test client as the
logged-in admin. Its actions must change exactly the rows the admin commands change."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from bots import texts
from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Setting, Topic
from proxy.services.admin_users import admin_user_create_default
from tests.bots.conftest import START
from tests.bots.helpers import card_text, dm_texts, make_user, open_conversation, set_switches
from tests.bots.test_bot_id_filter import _names_the_bot, _touches_business_table

USERS = reverse("admin:bots_botuserlisting_changelist")
TOPICS = reverse("admin:bots_topiclisting_changelist")
LEDGER = reverse("admin:bots_relayedmessage_changelist")
UPDATES = reverse("admin:bots_processedupdatelisting_changelist")
SETTINGS = reverse("admin:bots_setting_changelist")
SWITCHES = reverse("admin:bots_setting_verification")
BOTS = reverse("admin:bots_bot_changelist")


@pytest.fixture
def operator(client, db):
    """The test client, logged in as the (single) admin of the console."""
    admin_user = admin_user_create_default(password="a long operator passphrase 7", now=START)
    client.force_login(admin_user)
    return client


@pytest.fixture
def ann(telegram):
    return telegram.user(7401, "Ann", username="ann_a")


@pytest.fixture
def ben(telegram):
    return telegram.user(7402, "Ben", username="ben_b")


@pytest.fixture
def conversations(webhook, telegram, ann, ben, clock) -> dict[int, Topic]:
    """Ann and Ben, both verified, each with a topic and a pinned card."""
    return {
        person.id: open_conversation(
            webhook, telegram, person, bot_id=telegram.bot.id, now=clock.now
        )
        for person in (ann, ben)
    }


def _action(operator, url: str, action: str, *pks: int):
    """Run a changelist action on the rows ``pks``; the page it lands on (messages shown)."""
    response = operator.post(
        url, {"action": action, "_selected_action": [str(pk) for pk in pks]}, follow=True
    )
    assert response.status_code == 200
    return response


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _listed(response, field: str) -> list[int]:
    return [getattr(row, field) for row in response.context["cl"].result_list]


def _command(webhook, telegram, admin, text: str, topic: Topic) -> None:
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text=text))


def _shape(user_id: int) -> dict:
    """The user's and binding's rows without what differs between two users by nature (ids,
    names, the topic's ids and title)."""
    user = BotUser.objects.filter(user_id=user_id).values().get()
    topic = Topic.objects.filter(user_id=user_id).values().get()
    for key in ("user_id", "first_name", "last_name", "username"):
        user.pop(key)
    for key in ("user_id", "thread_id", "title", "pinned_msg_id"):
        topic.pop(key)
    return {"user": user, "topic": topic}


def _card_shape(telegram, topic: Topic, person) -> str:
    card = card_text(telegram, Topic.objects.get(thread_id=topic.thread_id))
    return card.replace(f"{person.first_name} (@{person.username})", "NAME").replace(
        str(person.id), "ID"
    )


# ------------------------------------------------------------------ actions = commands


# (command, changelist action, commands run on both users first)
EQUIVALENT = [
    ("/ban", "ban_users", ()),
    ("/unban", "unban_users", ("/ban",)),
    ("/risk", "mark_risk", ()),
    ("/unrisk", "clear_risk", ("/risk",)),
    ("/archive", "archive_conversations", ()),
]


@pytest.mark.parametrize(("command", "action", "setup"), EQUIVALENT)
def test_an_admin_action_changes_the_rows_its_command_changes(
    command, action, setup, operator, webhook, telegram, admin, ann, ben, conversations, clock
):
    for text in setup:
        for person in (ann, ben):
            _command(webhook, telegram, admin, text, conversations[person.id])
    clock.advance(minutes=5)
    before = _shape(ben.id)

    _command(webhook, telegram, admin, command, conversations[ann.id])
    response = _action(operator, USERS, action, ben.id)

    assert _shape(ben.id) == _shape(ann.id)
    assert _shape(ben.id) != before
    assert _card_shape(telegram, conversations[ben.id], ben) == _card_shape(
        telegram, conversations[ann.id], ann
    )
    assert dm_texts(telegram, ben) == dm_texts(telegram, ann)
    assert [telegram.topic(conversations[person.id].thread_id).closed for person in (ann, ben)] == [
        command == "/archive"
    ] * 2
    assert len(_messages(response)) == 1
    assert _messages(response)[0].endswith(f": {ben.id}.")


def test_archive_from_the_topics_list_is_the_same_archive(
    operator, webhook, telegram, admin, ann, ben, conversations
):
    _command(webhook, telegram, admin, "/archive", conversations[ann.id])

    _action(operator, TOPICS, "archive_conversations", conversations[ben.id].thread_id)

    assert _shape(ben.id) == _shape(ann.id)
    assert _shape(ben.id)["topic"]["status"] == "closed"


def test_a_note_saved_in_the_admin_is_the_note_command(
    operator, webhook, telegram, admin, ann, ben, conversations
):
    _command(webhook, telegram, admin, "/note VIP customer", conversations[ann.id])
    url = reverse("admin:bots_topiclisting_change", args=[quote(conversations[ben.id].thread_id)])

    response = operator.post(url, {"note": "  VIP customer  ", "_save": "Save"})

    assert response.status_code == 302
    assert _shape(ben.id) == _shape(ann.id)
    assert Topic.objects.get(user_id=ben.id).note == "VIP customer"
    assert _card_shape(telegram, conversations[ben.id], ben).endswith("\n备注：VIP customer")

    operator.post(url, {"note": "", "_save": "Save"})  # empty clears it, as /unnote does
    _command(webhook, telegram, admin, "/unnote", conversations[ann.id])
    assert _shape(ben.id) == _shape(ann.id)
    assert Topic.objects.get(user_id=ben.id).note is None


def test_the_switches_form_is_the_switch_commands(operator, webhook, telegram, clock):
    person = telegram.user(7403, "Cid")
    webhook.deliver_ok(telegram.private_message(person, text="hi"))  # a pending challenge
    pending = BotUser.objects.get(user_id=person.id).verify_request_hash
    assert pending is not None

    response = operator.post(SWITCHES, {"verify_enabled": "1", "verify_mode": "math"}, follow=True)

    # The values in effect: stored, nothing voided, nothing bumped.
    assert _messages(response) == ["Switches unchanged (same values): nothing voided."]
    assert dict(Setting.objects.values_list("key", "value")) == {
        "verify_enabled": "1",
        "verify_mode": "math",
    }
    assert BotUser.objects.get(user_id=person.id).verify_request_hash == pending

    response = operator.post(
        SWITCHES, {"verify_enabled": "1", "verify_mode": "button"}, follow=True
    )

    assert _messages(response) == ["Switches saved; outstanding challenges were voided."]
    assert dict(Setting.objects.values_list("key", "value")) == {
        "verify_enabled": "1",
        "verify_mode": "button",
        "verify_generation": "1",
    }
    assert BotUser.objects.get(user_id=person.id).verify_request_hash is None


@pytest.mark.parametrize(
    "data",
    [
        {"verify_enabled": "1", "verify_mode": "turnstile"},  # no Turnstile keys configured
        {"verify_enabled": "maybe", "verify_mode": "math"},
        {},
    ],
)
def test_the_switches_form_refuses_other_values(data, operator, bot_row):
    response = operator.post(SWITCHES, data, follow=True)

    assert _messages(response)[0].startswith("Nothing changed:")
    assert Setting.objects.count() == 0


def test_the_switches_turn_verification_off_in_turnstile_mode_whose_keys_are_gone(
    operator, bot_row, settings
):
    """Issue 36: the form always sends the mode; Turnstile kept as it is (its keys removed
    since) is no switch to Turnstile, so turning verification off is not refused for it."""
    set_switches(verify_enabled="1", verify_mode="turnstile")
    settings.TURNSTILE_SITE_KEY = None
    settings.TURNSTILE_SECRET_KEY = None

    response = operator.post(
        SWITCHES, {"verify_enabled": "0", "verify_mode": "turnstile"}, follow=True
    )

    assert _messages(response) == ["Switches saved; outstanding challenges were voided."]
    assert dict(Setting.objects.values_list("key", "value")) == {
        "verify_enabled": "0",
        "verify_mode": "turnstile",
        "verify_generation": "1",
    }
    # A switch to Turnstile without its keys is still refused.
    set_switches(verify_mode="math")
    response = operator.post(
        SWITCHES, {"verify_enabled": "0", "verify_mode": "turnstile"}, follow=True
    )
    assert _messages(response)[0].startswith("Nothing changed:")
    assert Setting.objects.get(key="verify_mode").value == "math"


def test_the_switches_form_sets_turnstile_when_both_keys_are_set(operator, bot_row, settings):
    settings.TURNSTILE_SITE_KEY = "0x4AAAAAAAreal-site-key"
    settings.TURNSTILE_SECRET_KEY = "0x4AAAAAAAreal-secret-key"

    response = operator.post(
        SWITCHES, {"verify_enabled": "1", "verify_mode": "turnstile"}, follow=True
    )

    assert _messages(response) == ["Switches saved; outstanding challenges were voided."]
    assert dict(Setting.objects.values_list("key", "value")) == {
        "verify_enabled": "1",
        "verify_mode": "turnstile",
        "verify_generation": "1",
    }


def test_the_switches_form_names_the_missing_turnstile_key(operator, bot_row, settings):
    settings.TURNSTILE_SITE_KEY = "0x4AAAAAAAreal-site-key"
    settings.TURNSTILE_SECRET_KEY = None

    response = operator.post(
        SWITCHES, {"verify_enabled": "1", "verify_mode": "turnstile"}, follow=True
    )

    assert _messages(response) == [
        "Nothing changed: * verify_mode\n  * Turnstile needs TURNSTILE_SECRET_KEY."
    ]
    assert Setting.objects.count() == 0


def test_the_switches_form_only_posts(operator, bot_row):
    assert operator.get(SWITCHES).status_code == 405


# ------------------------------------------------------------------ Telegram missing or failing


def test_without_a_bot_token_database_changes_still_happen_and_archive_waits(
    operator, webhook, bot_settings, telegram, ann, conversations
):
    bot_settings.TELEGRAM_BOT_TOKEN = None
    telegram.forget_calls()

    risk = _action(operator, USERS, "mark_risk", ann.id)
    archive = _action(operator, USERS, "archive_conversations", ann.id)

    assert BotUser.objects.get(user_id=ann.id).is_risk is True
    assert _messages(risk)[1] == (
        "Cards not refreshed (the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)): "
        f"{ann.id}."
    )
    assert _messages(archive) == [
        f"{ann.id}: not archived, the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)"
    ]
    assert Topic.objects.get(user_id=ann.id).status == "open"
    assert telegram.calls() == []


def test_a_telegram_outage_during_archive_changes_nothing_and_a_repeat_converges(
    operator, telegram, ann, conversations
):
    telegram.fail("closeForumTopic", status=502)

    failed = _action(operator, USERS, "archive_conversations", ann.id)

    assert _messages(failed)[0].startswith(f"{ann.id}: Telegram did not answer (")
    assert BotUser.objects.get(user_id=ann.id).status == "active"

    done = _action(operator, USERS, "archive_conversations", ann.id)

    assert _messages(done) == [f"Archived (topic closed, verification cleared): {ann.id}."]
    assert BotUser.objects.get(user_id=ann.id).status == "deleted"
    assert dm_texts(telegram, ann) == [texts.archive_notice()]


def test_archive_reports_users_without_a_topic(operator, telegram, webhook, clock):
    loner = telegram.user(7404, "Lone")
    make_user(loner, bot_id=telegram.bot.id, now=clock.now)

    response = _action(operator, USERS, "archive_conversations", loner.id)

    assert _messages(response) == [f"No topic to archive: {loner.id}."]
    assert BotUser.objects.get(user_id=loner.id).status == "active"


# ------------------------------------------------------------------ the screens


def test_every_screen_renders_and_only_shows_this_bot(
    operator, webhook, telegram, ann, ben, conversations, clock
):
    BotUser.objects.create(
        bot_id=1, user_id=ann.id, first_seen_at=clock.now, last_seen_at=clock.now
    )
    ProcessedUpdate.objects.create(bot_id=1, update_id=5, status="processed", created_at=clock.now)

    users = operator.get(USERS)
    topics = operator.get(TOPICS)
    ledger = operator.get(LEDGER)
    updates = operator.get(UPDATES)

    assert sorted(_listed(users, "user_id")) == [ann.id, ben.id]
    assert {row.bot_id for row in users.context["cl"].result_list} == {telegram.bot.id}
    assert sorted(_listed(topics, "user_id")) == [ann.id, ben.id]
    assert sorted(_listed(ledger, "user_id")) == [ann.id, ben.id]
    assert len(_listed(updates, "update_id")) == 2
    assert 5 not in _listed(updates, "update_id")
    assert operator.get(BOTS).status_code == 200
    index = operator.get(reverse("admin:app_list", args=["bots"])).content.decode()
    for screen in (USERS, TOPICS, LEDGER, UPDATES, SETTINGS, BOTS):
        assert f'href="{screen}"' in index
    topic_page = operator.get(
        reverse("admin:bots_topiclisting_change", args=[quote(conversations[ann.id].thread_id)])
    )
    assert topic_page.context["adminform"].form.fields.keys() == {"note"}
    settings_page = operator.get(SETTINGS)
    assert settings_page.context["switches"].mode == "math"
    html = settings_page.content.decode()
    assert f'<form method="post" action="{SWITCHES}">' in html
    assert 'name="verify_mode"' in html and 'value="turnstile"' in html


def test_users_are_found_by_id_name_and_username(operator, ann, ben, conversations):
    def found(query: str) -> list[int]:
        return _listed(operator.get(USERS, {"q": query}), "user_id")

    assert found(str(ann.id)) == [ann.id]
    assert found("Ben") == [ben.id]
    assert found("@ann_a") == [ann.id]
    assert found("ann_") == [ann.id]
    assert found("nobody") == []
    assert found("9" * 30) == []  # longer than any id: no match, no error


def test_users_are_filtered_by_ban_risk_verification_and_status(
    operator, webhook, telegram, admin, ann, ben, conversations
):
    _command(webhook, telegram, admin, "/ban", conversations[ann.id])
    _command(webhook, telegram, admin, "/risk", conversations[ben.id])
    _command(webhook, telegram, admin, "/archive", conversations[ben.id])

    def listed(**filters: str) -> list[int]:
        return _listed(operator.get(USERS, filters), "user_id")

    assert listed(is_banned__exact="1") == [ann.id]
    assert listed(is_risk__exact="1") == [ben.id]
    assert listed(is_verified__exact="1") == [ann.id]
    assert listed(status__exact="deleted") == [ben.id]
    assert listed(status__exact="active") == [ann.id]


def test_the_user_page_links_to_its_topic_and_ledger(operator, ann, conversations):
    topic = conversations[ann.id]

    page = operator.get(USERS).content.decode()
    detail = operator.get(reverse("admin:bots_botuserlisting_change", args=[quote(ann.id)]))

    topic_url = reverse("admin:bots_topiclisting_change", args=[quote(topic.thread_id)])
    assert f'<a href="{topic_url}">{topic.thread_id} (open)</a>' in page
    assert f'<a href="{LEDGER}?user_id={ann.id}">messages</a>' in page
    assert detail.status_code == 200
    assert detail.context["adminform"].form.instance.user_id == ann.id
    assert detail.context["has_change_permission"] is False  # a read-only page, no Save


def test_the_ledger_is_read_by_user_or_thread(
    operator, webhook, telegram, admin, ann, ben, conversations
):
    thread_id = conversations[ann.id].thread_id
    webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="answer"))

    by_user = _listed(operator.get(LEDGER, {"user_id": ann.id}), "direction")
    by_thread = _listed(operator.get(LEDGER, {"thread_id": thread_id}), "direction")
    searched = _listed(operator.get(LEDGER, {"q": str(thread_id)}), "thread_id")

    assert sorted(by_user) == ["in", "out"]
    assert sorted(by_thread) == ["in", "out"]
    assert searched == [thread_id, thread_id]
    assert _listed(operator.get(LEDGER, {"q": "words"}), "id") == []
    message = RelayedMessage.objects.filter(user_id=ann.id).first()
    detail = operator.get(reverse("admin:bots_relayedmessage_change", args=[quote(message.id)]))
    assert detail.status_code == 200


def test_nothing_is_added_deleted_or_edited_by_hand(operator, ann, conversations):
    for name in (
        "botuserlisting",
        "topiclisting",
        "relayedmessage",
        "processedupdatelisting",
        "setting",
        "bot",
    ):
        assert operator.get(reverse(f"admin:bots_{name}_add")).status_code == 403
    user_url = reverse("admin:bots_botuserlisting_change", args=[quote(ann.id)])
    operator.post(user_url, {"is_banned": "on", "first_name": "Mallory"})
    row = BotUser.objects.get(user_id=ann.id)
    assert (row.is_banned, row.first_name) == (False, "Ann")
    setting_url = reverse("admin:bots_setting_change", args=[quote("verify_mode")])
    assert setting_url.endswith("/verify_5Fmode/change/")
    assert operator.post(setting_url, {"value": "button"}).status_code in (403, 404)
    actions = operator.get(USERS).context["action_form"].fields["action"].choices
    assert "delete_selected" not in [name for name, _ in actions]


def test_the_processed_updates_are_listed_read_only(
    operator, webhook, telegram, ann, conversations
):
    update = ProcessedUpdate.objects.filter(bot_id=telegram.bot.id).first()

    page = operator.get(UPDATES, {"status__exact": "processed"})
    detail = operator.get(
        reverse("admin:bots_processedupdatelisting_change", args=[quote(update.update_id)])
    )

    assert _listed(page, "status") == ["processed", "processed"]
    assert _listed(operator.get(UPDATES, {"q": str(update.update_id)}), "update_id") == [
        update.update_id
    ]
    assert detail.status_code == 200


def test_every_admin_statement_on_a_business_table_names_the_bot(
    operator, webhook, telegram, admin, ann, ben, conversations
):
    with CaptureQueriesContext(connection) as captured:
        operator.get(USERS, {"q": "ann", "is_banned__exact": "0"})
        operator.get(TOPICS, {"q": "Ben"})
        operator.get(LEDGER, {"user_id": ann.id})
        operator.get(UPDATES)
        operator.get(reverse("admin:bots_botuserlisting_change", args=[quote(ann.id)]))
        url = reverse(
            "admin:bots_topiclisting_change", args=[quote(conversations[ben.id].thread_id)]
        )
        operator.get(url)
        operator.post(url, {"note": "x", "_save": "Save"})
        for action in (
            "ban_users",
            "unban_users",
            "mark_risk",
            "clear_risk",
            "archive_conversations",
        ):
            _action(operator, USERS, action, ann.id)
        _action(operator, TOPICS, "archive_conversations", conversations[ben.id].thread_id)
        operator.post(SWITCHES, {"verify_enabled": "0", "verify_mode": "button"})

    business = [query["sql"] for query in captured if _touches_business_table(query["sql"])]
    assert len(business) > 30
    assert [sql for sql in business if not _names_the_bot(sql)] == []
