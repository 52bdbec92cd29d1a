"""Shortcuts of the broadcast tests: eligible users, a draft in General, its buttons, a run of
the send loop in this process (the same code the Celery task runs)."""

from __future__ import annotations

import base64
import json
import threading
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from bots.models import BotUser, Broadcast, Topic
from bots.pipeline.broadcast.jobs import SendJob
from bots.pipeline.broadcast.sending import run_send_job
from tests.bots.helpers import keyboard_data
from tests.fakes.telegram import BOT_ID, FakeMessage, FakeTelegram, FakeUser

TITLE_AND_BODY = "/broadcast Service window\nWe upgrade on Sunday.\n\nThanks for waiting!"
# What users get for TITLE_AND_BODY from the fake's bot (first name "Hodor").
ANNOUNCEMENT_HTML = (
    "<b>📣 Service window</b>\n\nWe upgrade on Sunday.\n\nThanks for waiting!\n\n<i>— Hodor</i>"
)
# The ``people`` fixture's users.
PEOPLE = [6001, 6002, 6003]
ANNOUNCEMENT_TEXT = "📣 Service window\n\nWe upgrade on Sunday.\n\nThanks for waiting!\n\n— Hodor"


def eligible_users(
    telegram: FakeTelegram, *, bot_id: int, now: datetime, user_ids: range | list[int], **fields
) -> list[FakeUser]:
    """Users with a users row and a binding (what makes them eligible), known to Telegram (the
    bot may message them). ``fields`` go to their users rows (``is_banned=True``, ...)."""
    people = [telegram.user(user_id, f"User {user_id}") for user_id in user_ids]
    telegram.met(*people)
    BotUser.objects.bulk_create(
        BotUser(
            bot_id=bot_id,
            user_id=person.id,
            first_name=person.first_name,
            first_seen_at=now,
            last_seen_at=now,
            **fields,
        )
        for person in people
    )
    Topic.objects.bulk_create(
        Topic(
            bot_id=bot_id,
            user_id=person.id,
            thread_id=900_000 + person.id,
            title=person.first_name,
            created_at=now,
        )
        for person in people
    )
    return people


@dataclass(frozen=True)
class Control:
    """A broadcast's control message as General shows it."""

    message: FakeMessage
    confirm: str  # b:y:<id>
    cancel: str  # b:n:<id>

    @property
    def broadcast_id(self) -> int:
        return int(self.confirm.rsplit(":", 1)[1])


def general_messages(telegram: FakeTelegram) -> list[FakeMessage]:
    return [
        message
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.thread_id is None
    ]


def start_draft(webhook, telegram: FakeTelegram, admin: FakeUser, text: str = TITLE_AND_BODY):
    """``admin`` sends ``text`` in General; returns the control message it produced."""
    webhook.deliver_ok(telegram.group_message(admin, thread_id=None, text=text))
    return control_of(telegram)


def control_of(telegram: FakeTelegram) -> Control:
    """The newest control message in General (the newest message with buttons)."""
    message = [m for m in general_messages(telegram) if keyboard_data(m)][-1]
    confirm, cancel = keyboard_data(message)
    return Control(message=message, confirm=confirm, cancel=cancel)


def click(webhook, telegram: FakeTelegram, who: FakeUser, control: Control, data: str) -> str:
    """``who`` presses ``data`` under the control message; the toast Telegram showed."""
    update = telegram.click(
        who, message_id=control.message.message_id, data=data, chat_id=telegram.support_chat_id
    )
    webhook.deliver_ok(update)
    return telegram.callback_answer(update["callback_query"]["id"])


# Where runs queued by a run of the loop in a test go: a queue no worker consumes (a test's rows
# are not committed, so no worker could run them anyway).
UNCONSUMED_QUEUE = "tests.broadcast.unconsumed"


def run_loop(broadcast_id: int | SendJob) -> str:
    """One run of the send loop here (the Celery task's body); what it ended with."""
    job = (
        broadcast_id
        if isinstance(broadcast_id, SendJob)
        else SendJob(bot_id=BOT_ID, broadcast_id=broadcast_id)
    )
    return run_send_job(job, queue=UNCONSUMED_QUEUE)


class LoopThread(threading.Thread):
    """``run_loop`` in a thread of its own, keeping what the run ended with (or the traceback
    it died of) for the test's messages: a loop that ended early says why."""

    def __init__(self, broadcast_id: int) -> None:
        super().__init__(name=f"broadcast-loop-{broadcast_id}")
        self.broadcast_id = broadcast_id
        self.outcome: str | None = None
        self.error: str | None = None

    def run(self) -> None:
        from django.db import connection

        try:
            self.outcome = run_loop(self.broadcast_id)
        except BaseException:
            self.error = traceback.format_exc()
            raise
        finally:
            connection.close()

    def report(self) -> str:
        state = "still running" if self.is_alive() else f"ended with {self.outcome!r}"
        return state + (f", died of:\n{self.error}" if self.error else "")


def take_queued_runs(redis_client) -> list[SendJob]:
    """The runs the loop queued on UNCONSUMED_QUEUE (taken off the queue): Celery's messages
    as the broker holds them, decoded."""
    queue = f"{settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix']}{UNCONSUMED_QUEUE}"
    jobs = []
    while (raw := redis_client.rpop(queue)) is not None:
        message = json.loads(raw)
        assert message["headers"]["task"] == "bots.tasks.broadcast_send_task"
        _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        jobs.append(SendJob(**kwargs))
    return jobs


def take_queued_runs_with_countdowns(redis_client) -> list[tuple[SendJob, float]]:
    """As ``take_queued_runs``, with the seconds from now until each run may start (its ETA
    as Celery's message carries it; 0 for a run without one)."""
    queue = f"{settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix']}{UNCONSUMED_QUEUE}"
    runs = []
    while (raw := redis_client.rpop(queue)) is not None:
        message = json.loads(raw)
        _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        eta = message["headers"].get("eta")
        countdown = (
            (datetime.fromisoformat(eta) - datetime.now(UTC)).total_seconds() if eta else 0.0
        )
        runs.append((SendJob(**kwargs), countdown))
    return runs


def received(telegram: FakeTelegram, person: FakeUser) -> list[str | None]:
    """The HTML of every message the bot sent ``person`` (their private chat)."""
    return [message.html for message in telegram.bot_messages(person.id)]


def row(broadcast_id: int) -> Broadcast | None:
    return Broadcast.objects.filter(id=broadcast_id).first()


def make_broadcast(
    telegram: FakeTelegram,
    *,
    initiator: FakeUser,
    now: datetime,
    status: str,
    recipients: list[int] | None = None,
    **fields,
) -> Broadcast:
    """A broadcast row in ``status`` with a control message of the bot in General (as a
    broadcast that got that far has), for states the buttons alone cannot reach quickly;
    ``recipients``: its frozen list (and expected count)."""
    chat = telegram.support_chat_id
    preview = telegram.bot_sends(chat, text="📣 earlier")
    control = telegram.bot_sends(chat, text="📤 正在发送……")
    values = {
        "bot_id": telegram.bot.id,
        "source_update_id": 1,
        "initiator_user_id": initiator.id,
        "support_chat_id": chat,
        "message_html": "<b>📣 earlier</b>",
        "status": status,
        "preview_msg_id": preview,
        "control_msg_id": control,
        "expires_at": now,
        "created_at": now,
        "updated_at": now,
        **(
            {"recipient_ids_json": json.dumps(recipients), "expected_count": len(recipients)}
            if recipients is not None
            else {}
        ),
        **fields,
    }
    return Broadcast.objects.create(**values)


def people_broadcast(
    telegram: FakeTelegram, *, initiator: FakeUser, now: datetime, status: str, **fields
) -> Broadcast:
    """``make_broadcast`` to the ``people`` fixture's three users."""
    return make_broadcast(
        telegram, initiator=initiator, now=now, status=status, recipients=PEOPLE, **fields
    )


def control_text(telegram: FakeTelegram, broadcast: Broadcast) -> str | None:
    """What the broadcast's control message says now."""
    return telegram.message(telegram.support_chat_id, broadcast.control_msg_id).text
