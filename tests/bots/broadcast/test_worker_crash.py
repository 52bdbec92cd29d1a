"""A broadcast to 2,000 users (the cap raised) through real Celery workers of this test's own,
against a fake Bot API enforcing Telegram's flood control, with injected 429s — and the worker
SIGKILLed twice during the send: its pool process (Celery redelivers the task), then the whole
worker (a new one is started; it resumes the broadcast). The fake's timestamps show the pacing;
its record shows nobody got the announcement twice and the final statistics are its record."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter, defaultdict

import psutil
import pytest
from celery.app import routes

from bots import texts
from bots.models import Broadcast
from config.celery import app as celery_app
from tests.bots.broadcast.helpers import eligible_users, start_draft
from tests.conftest import BOT_DELETES_PER_SECOND, CeleryWorkerProcess, run_database_url
from tests.fakes.telegram import most_in_one_second

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]

QUEUE = "tests.broadcast.crash"
RECIPIENTS = 2000
BLOCKED = 20  # users who blocked the bot: their sends fail (403) and count as failures
MESSAGES = ("sendMessage", "editMessageText")
DONE = re.compile(
    r"✅ 广播完成：成功 (\d+)，失败 (\d+)\n（成功 = Telegram 已接收，不代表已读；失败的不会重发）"
    r"(?:\n另有 (\d+) 位在发送时发送进程中断，是否送达未知，不会重发。)?"
)
PROGRESS = re.compile(r"📤 正在发送……\n已发送 (\d+)，失败 (\d+)，剩余 (\d+)")


@pytest.fixture
def broadcasts_routed_to_this_tests_queue(monkeypatch):
    """This process queues the broadcast's runs on QUEUE, which only this test's workers
    consume (the session's worker talks to another fake Bot API)."""
    router = routes.Router(
        routes.prepare({"bots.tasks.broadcast_send_task": {"queue": QUEUE}}),
        celery_app.amqp.queues,
        True,
        app=celery_app,
    )
    monkeypatch.setattr(celery_app.amqp, "router", router)


@pytest.fixture
def start_worker(django_db_blocker, tmp_path, telegram):
    workers: list[CeleryWorkerProcess] = []

    def start(name: str, *pool: str) -> CeleryWorkerProcess:
        worker = CeleryWorkerProcess(
            run_database_url(django_db_blocker),
            tmp_path / f"{name}.log",
            {
                "TELEGRAM_API_BASE": telegram.api_base,
                "TELEGRAM_BOT_TOKEN": telegram.token,
                "SUPPORT_CHAT_ID": str(telegram.support_chat_id),
                "TELEGRAM_DELETES_PER_SECOND": BOT_DELETES_PER_SECOND,
                "BROADCAST_MAX_RECIPIENTS": str(RECIPIENTS),
                "BOT_LANGUAGE": "zh",
            },
            arguments=(*pool, "-Q", QUEUE, "-n", f"{name}@%h"),
        )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def _wait_until(condition, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _accepted_sends(telegram) -> list:
    return [call for call in telegram.calls("sendMessage") if call.ok]


def _kill_during_a_send(telegram, processes, *, after_sends: int) -> None:
    """Once ``after_sends`` recipients got the announcement, hold the next send at Telegram,
    SIGKILL ``processes`` while it is in flight, then let Telegram deliver it."""
    _wait_until(
        lambda: len(_accepted_sends(telegram)) >= after_sends, timeout=120, what="the sends"
    )
    held = telegram.hold("sendMessage")
    assert held.wait_until_arrived(20)
    for process in processes():
        process.send_signal(signal.SIGKILL)
    time.sleep(0.5)
    held.release()


def test_a_2000_user_broadcast_survives_two_worker_kills_within_telegrams_limits(
    broadcasts_routed_to_this_tests_queue,
    start_worker,
    bot_settings,
    webhook,
    telegram,
    admin,
    clock,
):
    bot_settings.BROADCAST_MAX_RECIPIENTS = str(RECIPIENTS)
    people = eligible_users(
        telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(20_001, 20_001 + RECIPIENTS)
    )
    blocked = {person.id for person in people[50::100]}
    assert len(blocked) == BLOCKED
    for user_id in blocked:
        telegram.block(user_id)
    control = start_draft(webhook, telegram, admin)
    chat = telegram.support_chat_id
    # Telegram's flood control from now on (the webhook's own replies came before), and three
    # 429s the bot did not cause (another bot on the same IP, say).
    telegram.limit_rate(1, methods=MESSAGES)
    telegram.limit_global_rate(30, methods=MESSAGES)
    for number, retry_after in ((200, 2), (900, 1), (1500, 3)):
        telegram.fail_call(number, status=429, retry_after=retry_after)
    first_worker = start_worker("first", "--pool", "prefork", "--concurrency", "1")

    confirm = telegram.click(
        admin, message_id=control.message.message_id, data=control.confirm, chat_id=chat
    )
    before_the_confirm = len(telegram.calls())
    webhook.deliver_ok(confirm)
    assert telegram.callback_answer(confirm["callback_query"]["id"]) == (
        texts.toast_broadcast_confirmed()
    )

    # Crash 1: the pool process running the task dies; Celery redelivers the task.
    main = psutil.Process(first_worker.process.pid)
    _kill_during_a_send(telegram, lambda: main.children(), after_sends=600)
    # Crash 2: the whole worker dies (its task stays with the broker for an hour); another
    # worker starts and resumes the broadcast once the dead loop's lease has lapsed.
    _kill_during_a_send(telegram, lambda: [*main.children(), main], after_sends=1300)
    first_worker.process.wait(10)
    start_worker("second", "--pool", "solo")

    def final_text():
        return telegram.message(chat, control.message.message_id).text

    _wait_until(
        lambda: DONE.fullmatch(final_text()) and not Broadcast.objects.exists(),
        timeout=240,
        what="the final statistics",
    )
    sent, failed, unknown = (int(group or 0) for group in DONE.fullmatch(final_text()).groups())

    # Nobody got it twice; everybody who did not block the bot got it (a 429 is retried).
    deliveries = Counter(call.params["chat_id"] for call in _accepted_sends(telegram))
    deliveries.pop(chat, None)
    assert max(deliveries.values()) == 1
    assert set(deliveries) == {person.id for person in people} - blocked
    # The final edit's totals are the fake's record: the two sends in flight at the kills
    # reached Telegram, and are the unknown ones (counted apart, never resent).
    assert unknown == 2
    assert (sent, failed) == (RECIPIENTS - BLOCKED - unknown, BLOCKED)
    assert sent + unknown == len(deliveries)

    # Every message call since the confirm is the workers' (the webhook only answered the click).
    calls = [call for call in telegram.calls()[before_the_confirm:] if call.method in MESSAGES]
    # Pacing, from the fake's arrival times (the fake's own flood control would have refused
    # what broke it, and the only 429s are the three injected ones): at most 30 in any
    # second, which makes 2,000 sends last at least 2,000 / 30 seconds ...
    arrivals = [call.at for call in calls]
    assert most_in_one_second(arrivals) <= 30
    assert arrivals[-1] - arrivals[0] >= RECIPIENTS / 30
    refusals = [call for call in calls if call.status == 429]
    assert [call.retry_after for call in refusals] == [2, 1, 3]
    # ... at most one a second into any chat, over the chats that got more than one call:
    # the support chat (the progress edits and the statistics) and each chat whose call was
    # refused with a 429 (the same call again after the wait) ...
    by_chat = defaultdict(list)
    for call in calls:
        by_chat[call.params["chat_id"]].append(call.at)
    repeated = {chat_id: times for chat_id, times in by_chat.items() if len(times) > 1}
    assert {chat, *(call.params["chat_id"] for call in refusals)} <= set(repeated)
    assert len(repeated[chat]) >= 6
    closest = min(
        later - earlier
        for times in repeated.values()
        for earlier, later in zip(times, times[1:], strict=False)
    )
    assert closest >= 1.0
    # ... and none inside a retry_after: of the whole bot after a 429 into a private chat, of
    # the group after one into the group (a progress edit may meet an injected 429; the
    # limiter then blocks the group's bucket only, as Telegram's group limit is the group's).
    for refusal in refusals:
        blocked = refusal.params["chat_id"]
        inside = [
            c
            for c in calls
            if refusal.at < c.at < refusal.at + refusal.retry_after
            and (blocked > 0 or c.params["chat_id"] == blocked)
        ]
        assert inside == [], (refusal.method, blocked)
    # The control message showed the progress on the way.
    progress = [
        tuple(int(number) for number in PROGRESS.fullmatch(call.params["text"]).groups())
        for call in telegram.calls("editMessageText")
        if call.ok and PROGRESS.fullmatch(call.params["text"])
    ]
    assert len(progress) >= 5
    assert progress[0] == (0, 0, RECIPIENTS)
    assert [done for done, _, _ in progress] == sorted(done for done, _, _ in progress)
    assert all(done + fails + left == RECIPIENTS for done, fails, left in progress)
