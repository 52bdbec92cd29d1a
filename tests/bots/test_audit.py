"""The audit trail of admin actions (issue #24): one ``admin_audit_log`` row per action, from
Telegram commands and buttons or from the console — who, when, which user, the outcome —
once per update (a redelivery adds nothing), readable and filterable in the console, trimmed
after AUDIT_RETENTION_DAYS."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from bots import texts
from bots.models import AdminAuditEntry, AuditAction, AuditOutcome, AuditSurface, BotUser, Topic
from bots.pipeline import bulk
from bots.services.audit import audit_record
from bots.task_names import PURGE_CONTINUE_TASK
from bots.tasks import admin_audit_trim_task, purge_continue_task
from proxy.services.admin_users import admin_user_create_default
from tests.bots.broadcast.helpers import click as broadcast_click
from tests.bots.broadcast.helpers import start_draft
from tests.bots.conftest import ADMIN_ID, START
from tests.bots.helpers import card_text, click_in_group, keyboard_data, open_conversation

AUDIT = reverse("admin:bots_adminauditentry_changelist")
USERS = reverse("admin:bots_botuserlisting_changelist")


def _rows() -> list[tuple]:
    return list(
        AdminAuditEntry.objects.order_by("id").values_list(
            "surface", "actor_id", "actor_name", "action", "target_user_id", "outcome", "detail"
        )
    )


def _telegram(action, outcome, user_id=None, detail="") -> tuple:
    return ("telegram", ADMIN_ID, "@alice_support", action, user_id, outcome, detail)


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


@pytest.fixture
def operator(client, db):
    admin_user = admin_user_create_default(password="a long operator passphrase 7", now=START)
    client.force_login(admin_user)
    # The console's log-in name (CPR_ADMIN_USERNAME), not the admin row's id (issue 38).
    client.username = "admin"
    assert admin_user.get_username() != client.username
    return client


def _command(webhook, telegram, admin, text: str, thread_id: int | None) -> dict:
    update = telegram.group_message(admin, thread_id=thread_id, text=text)
    webhook.deliver_ok(update)
    return update


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (["/ban"], [("ban", "done", "")]),
        (["/ban", "/unban"], [("ban", "done", ""), ("unban", "done", "")]),
        (["/note VIP customer"], [("note", "done", "12 characters")]),
        (["/note x", "/unnote"], [("note", "done", "1 characters"), ("unnote", "done", "")]),
        (["/risk", "/unrisk"], [("risk", "done", ""), ("unrisk", "done", "")]),
        (["/archive"], [("archive", "done", "")]),
        (["/purgemsg"], [("purge", "done", "deleted 2, already gone 0, failed 0 of 2")]),
        (["/deluser"], [("delete_user", "requested", "")]),
    ],
)
def test_each_command_about_the_topics_user_leaves_one_row(
    commands, expected, webhook, telegram, admin, user, topic, clock
):
    for text in commands:
        _command(webhook, telegram, admin, text, topic.thread_id)

    assert _rows() == [
        _telegram(action, outcome, user.id, detail) for action, outcome, detail in expected
    ]
    assert set(AdminAuditEntry.objects.values_list("created_at", flat=True)) == {clock.now}


@pytest.mark.parametrize("command", ["/deluser", "/wipealldata"])
def test_a_prompt_telegram_refused_is_not_recorded_as_requested(
    command, webhook, telegram, admin, user, topic
):
    """Issue 36: the "requested" row was written whether or not the prompt reached the group."""
    telegram.fail(
        "sendMessage",
        status=400,
        description="Bad Request: not enough rights to send text messages to the chat",
    )

    _command(webhook, telegram, admin, command, topic.thread_id)

    assert [call.status for call in telegram.calls("sendMessage")][-1] == 400
    assert _rows() == []


def test_a_redelivered_command_is_recorded_once(webhook, telegram, admin, user, topic):
    update = _command(webhook, telegram, admin, "/ban", topic.thread_id)
    # Telegram redelivers (the first answer was lost): the claim says duplicate; and a
    # delivery that takes over a failed attempt re-runs the command without a second row.
    webhook.deliver_ok(update)
    entry = AdminAuditEntry.objects.get()
    assert entry.source_update_id == update["update_id"]

    audit_record(
        bot_id=telegram.bot.id,
        surface=AuditSurface.TELEGRAM,
        action=AuditAction.BAN,
        outcome=AuditOutcome.DONE,
        now=START,
        actor_id=ADMIN_ID,
        target_user_id=user.id,
        source_update_id=update["update_id"],
    )

    assert AdminAuditEntry.objects.count() == 1


def test_a_failed_attempt_taken_over_by_its_redelivery_leaves_one_row(
    webhook, telegram, admin, user, topic, clock, inbox
):
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="/ban")
    telegram.fail("sendMessage", status=502)  # the reply fails after the ban and its row

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    inbox.later(seconds=60)

    assert _rows() == [_telegram("ban", "done", user.id)]


def test_verification_switches_are_recorded_with_what_was_set(webhook, telegram, admin):
    for text in ("/verifyoff", "/verifyon", "/verifymode_button", "/verifymode_turnstile"):
        _command(webhook, telegram, admin, text, None)

    assert _rows() == [
        _telegram("verification", "done", detail="verification off"),
        _telegram("verification", "done", detail="verification on"),
        _telegram("verification", "done", detail="mode button"),
        _telegram(
            "verification",
            "refused",
            detail="mode turnstile: missing TURNSTILE_SITE_KEY, TURNSTILE_SECRET_KEY",
        ),
    ]


def test_a_confirmed_deluser_is_recorded_with_its_outcome(webhook, telegram, admin, user, topic):
    _command(webhook, telegram, admin, "/deluser", topic.thread_id)
    prompt = telegram.topic_messages(topic.thread_id)[-1]
    confirm, _ = keyboard_data(prompt)

    click_in_group(webhook, telegram, admin, prompt.message_id, confirm)

    assert _rows() == [
        _telegram("delete_user", "requested", user.id),
        _telegram("delete_user", "done", user.id),
    ]


def test_a_cancelled_wipe_and_a_confirmed_one_are_recorded(webhook, telegram, admin, topic):
    outcomes = []
    for button in (1, 0):  # the prompt's buttons are [confirm, cancel]: cancel it, then confirm
        _command(webhook, telegram, admin, "/wipealldata", topic.thread_id)
        prompt = telegram.topic_messages(topic.thread_id)[-1]
        click_in_group(webhook, telegram, admin, prompt.message_id, keyboard_data(prompt)[button])
        outcomes.append(_rows()[-1])

    assert outcomes == [
        _telegram("wipe", "cancelled"),
        _telegram("wipe", "done", detail="topics deleted 1, already gone 0, failed 0"),
    ]
    assert [row[3:6] for row in _rows()] == [
        ("wipe", None, "requested"),
        ("wipe", None, "cancelled"),
        ("wipe", None, "requested"),
        ("wipe", None, "done"),
    ]


def test_a_confirmed_broadcast_is_recorded(webhook, telegram, admin, topic):
    control = start_draft(webhook, telegram, admin)

    broadcast_click(webhook, telegram, admin, control, control.confirm)

    assert _rows() == [
        _telegram("broadcast", "started", detail=f"broadcast {control.broadcast_id}: 1 recipients")
    ]


def test_console_actions_are_recorded_with_the_operator(
    operator, webhook, telegram, user, topic, settings
):
    operator.post(USERS, {"action": "ban_users", "_selected_action": [str(user.id)]})
    operator.post(USERS, {"action": "mark_risk", "_selected_action": [str(user.id)]})
    note_url = reverse("admin:bots_topiclisting_change", args=[quote(topic.thread_id)])
    operator.post(note_url, {"note": "from the console", "_save": "Save"})
    operator.post(
        reverse("admin:bots_setting_verification"),
        {"verify_enabled": "1", "verify_mode": "math"},
    )
    operator.post(reverse("admin:bots_topiclisting_purge", args=[topic.thread_id]))
    operator.post(USERS, {"action": "archive_conversations", "_selected_action": [str(user.id)]})
    operator.post(reverse("admin:bots_botuserlisting_delete_user", args=[user.id]))

    name = operator.username
    assert _rows() == [
        ("console", None, name, "ban", user.id, "done", ""),
        ("console", None, name, "risk", user.id, "done", ""),
        ("console", None, name, "note", user.id, "done", "16 characters"),
        ("console", None, name, "verification", None, "done", "verification on, mode math"),
        (
            "console",
            None,
            name,
            "purge",
            user.id,
            "done",
            "deleted 2, already gone 0, failed 0 of 2",
        ),
        ("console", None, name, "archive", user.id, "done", ""),
        ("console", None, name, "delete_user", user.id, "done", ""),
    ]


def _user_row(user_id: int) -> tuple[bool, bool]:
    return tuple(BotUser.objects.filter(user_id=user_id).values_list("is_banned", "is_risk").get())


def test_console_unban_and_unrisk_undo_the_commands_and_are_recorded(
    operator, webhook, telegram, admin, user, topic
):
    for text in ("/ban", "/risk"):
        _command(webhook, telegram, admin, text, topic.thread_id)
    assert _user_row(user.id) == (True, True)

    operator.post(USERS, {"action": "unban_users", "_selected_action": [str(user.id)]})
    assert _user_row(user.id) == (False, True)
    operator.post(USERS, {"action": "clear_risk", "_selected_action": [str(user.id)]})
    assert _user_row(user.id) == (False, False)

    name = operator.username
    assert _rows() == [
        _telegram("ban", "done", user.id),
        _telegram("risk", "done", user.id),
        ("console", None, name, "unban", user.id, "done", ""),
        ("console", None, name, "unrisk", user.id, "done", ""),
    ]
    # The high-risk line left the pinned card too (as /unrisk leaves it).
    assert texts.card_risk() not in card_text(telegram, Topic.objects.get(user_id=user.id))


def test_console_unnote_clears_the_note_and_is_recorded(
    operator, webhook, telegram, admin, user, topic
):
    _command(webhook, telegram, admin, "/note call back on Monday", topic.thread_id)
    assert Topic.objects.get(user_id=user.id).note == "call back on Monday"
    note_url = reverse("admin:bots_topiclisting_change", args=[quote(topic.thread_id)])

    response = operator.post(note_url, {"note": "", "_save": "Save"})

    assert response.status_code == 302
    cleared = Topic.objects.get(user_id=user.id)
    assert cleared.note is None
    assert "call back on Monday" not in card_text(telegram, cleared)
    assert _rows() == [
        _telegram("note", "done", user.id, "19 characters"),
        ("console", None, operator.username, "unnote", user.id, "done", "0 characters"),
    ]


class QueuedTasks:
    """Stands in for Celery's broker: the purge continuations the code queued."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def send_task(self, name: str, *, kwargs: dict, countdown: float | None = None) -> None:
        self.sent.append((name, json.loads(json.dumps(kwargs))))  # as the broker carries it

    def run_all(self) -> None:
        """Run each queued chunk as the worker would (each may queue the next)."""
        while self.sent:
            name, kwargs = self.sent.pop(0)
            assert name == PURGE_CONTINUE_TASK
            purge_continue_task(**kwargs)


@pytest.fixture
def in_the_worker(monkeypatch) -> QueuedTasks:
    """A purge does nothing inline: every message is left to its Celery continuation."""
    monkeypatch.setattr(bulk, "INLINE_BUDGET_SECONDS", 0.0)
    tasks = QueuedTasks()
    monkeypatch.setattr(bulk, "current_app", tasks)
    return tasks


def test_a_purge_continued_in_celery_records_its_outcome_with_the_counts(
    webhook, telegram, admin, user, topic, in_the_worker
):
    _command(webhook, telegram, admin, "/purgemsg", topic.thread_id)
    assert _rows() == [_telegram("purge", "started", user.id, "continues in the worker")]

    in_the_worker.run_all()

    assert _rows() == [
        _telegram("purge", "started", user.id, "continues in the worker"),
        _telegram(
            "purge",
            "done",
            user.id,
            "finished in the worker: deleted 2, already gone 0, failed 0 of 2",
        ),
    ]
    assert AdminAuditEntry.objects.order_by("id").last().source_update_id is None


def test_a_purge_continued_in_celery_that_could_not_delete_everything_is_recorded_failed(
    webhook, telegram, admin, user, topic, in_the_worker
):
    _command(webhook, telegram, admin, "/purgemsg", topic.thread_id)
    telegram.fail("deleteMessage", status=400, description="Bad Request: message can't be deleted")

    in_the_worker.run_all()

    assert _rows()[1:] == [
        _telegram(
            "purge",
            "failed",
            user.id,
            "finished in the worker: deleted 1, already gone 0, failed 1 of 2",
        )
    ]


def test_a_purge_interrupted_in_celery_is_recorded_failed(
    webhook, telegram, admin, user, topic, in_the_worker
):
    _command(webhook, telegram, admin, "/purgemsg", topic.thread_id)
    # Telegram does not answer, chunk after chunk, until the continuation gives up.
    telegram.fail("deleteMessage", status=502, times=bulk.MAX_TASK_RETRIES + 1)

    in_the_worker.run_all()

    assert _rows()[1:] == [
        _telegram(
            "purge",
            "failed",
            user.id,
            "interrupted in the worker: deleted 0, already gone 0, failed 0 of 2",
        )
    ]


def test_a_console_purge_continued_in_celery_records_its_outcome_for_the_operator(
    operator, webhook, telegram, user, topic, in_the_worker
):
    operator.post(reverse("admin:bots_topiclisting_purge", args=[topic.thread_id]))
    in_the_worker.run_all()

    name = operator.username
    assert _rows() == [
        ("console", None, name, "purge", user.id, "started", "continues in the worker"),
        (
            "console",
            None,
            name,
            "purge",
            user.id,
            "done",
            "finished in the worker: deleted 2, already gone 0, failed 0 of 2",
        ),
    ]


def test_a_console_action_on_a_missing_user_is_recorded_as_refused(operator, webhook, telegram):
    from bots.models import BotUser

    stranger = telegram.user(7901, "Dora")
    BotUser.objects.create(
        bot_id=telegram.bot.id, user_id=stranger.id, first_seen_at=START, last_seen_at=START
    )

    operator.post(USERS, {"action": "archive_conversations", "_selected_action": [str(7901)]})

    assert _rows() == [("console", None, operator.username, "archive", 7901, "refused", "no topic")]


def test_the_trail_is_read_and_filtered_in_the_console(
    operator, webhook, telegram, admin, user, topic
):
    for text in ("/ban", "/risk", "/unban"):
        _command(webhook, telegram, admin, text, topic.thread_id)
    other = telegram.user(7902, "Eli")
    _command(webhook, telegram, admin, "/verifyoff", None)
    assert other.id != user.id

    everything = operator.get(AUDIT)
    bans = operator.get(AUDIT, {"action": "ban"})
    about_the_user = operator.get(AUDIT, {"q": str(user.id)})
    by_the_admin = operator.get(AUDIT, {"q": "alice"})

    def listed(response):
        assert response.status_code == 200
        return [row.action for row in response.context["cl"].result_list]

    assert listed(everything) == ["verification", "unban", "risk", "ban"]
    assert listed(bans) == ["ban"]
    assert listed(about_the_user) == ["unban", "risk", "ban"]
    assert listed(by_the_admin) == ["verification", "unban", "risk", "ban"]
    assert b"@alice_support (111111111)" in everything.content
    assert operator.get(reverse("admin:bots_adminauditentry_add")).status_code == 403


def test_rows_older_than_the_retention_are_trimmed(db, bot_settings, telegram, clock):
    bot_settings.AUDIT_RETENTION_DAYS = "30"
    for age in (31, 30, 29, 1):
        audit_record(
            bot_id=telegram.bot.id,
            surface=AuditSurface.CONSOLE,
            action=AuditAction.BAN,
            outcome=AuditOutcome.DONE,
            now=clock.now - timedelta(days=age, seconds=1 if age == 30 else 0),
            actor_name=f"{age} days ago",
        )

    assert admin_audit_trim_task() == 2
    assert sorted(AdminAuditEntry.objects.values_list("actor_name", flat=True)) == [
        "1 days ago",
        "29 days ago",
    ]
    assert admin_audit_trim_task() == 0


def test_stopping_a_broadcast_in_the_console_is_recorded(operator, webhook, telegram, admin):
    from tests.bots.broadcast.helpers import make_broadcast

    running = make_broadcast(
        telegram, initiator=admin, now=START, status="sending", recipients=[7001, 7002]
    )
    draft = make_broadcast(
        telegram, initiator=admin, now=START, status="pending", source_update_id=2
    )

    for stopped in (running, draft, running):  # the draft's row goes once its end is shown
        operator.post(
            reverse("admin:bots_broadcast_changelist"),
            {"action": "stop_broadcasts", "_selected_action": [str(stopped.id)]},
        )

    def console(outcome, detail):
        return ("console", None, operator.username, "broadcast", None, outcome, detail)

    assert _rows() == [
        console(
            "cancelled",
            f"broadcast {running.id}: stopped from the console while sending: "
            "sent 0, failed 0, not sent 2 of 2",
        ),
        console("cancelled", f"broadcast {draft.id}: stop"),
        console("refused", f"broadcast {running.id}: stop: not in progress any more"),
    ]
