"""The outbound limiter's priorities, proved on a staged contest (issue #24): the bot's global
bucket is exhausted, a live relay (a webhook delivery) and a broadcast (its send loop) both wait
for it — each with its own limiter client, sharing only Redis, as separate processes do — and
when the bucket refills, the relay's call is the first that reaches Telegram.

The contest is staged so that it cannot be won by luck: the relay's process is held asleep
across the refill (as a descheduled process is) and wakes only after the broadcast has asked
for the refilled slot. Without the priorities the broadcast, asking first, would take it; so
would a broadcast sending at live priority.
"""

from __future__ import annotations

import threading
import time

import pytest

from bots.conf import BotConfig, load_config
from bots.models import Broadcast
from bots.outbound import limiter as limiter_module
from bots.outbound.limiter import OutboundLimiter, Permit, is_group
from tests.bots.broadcast.helpers import eligible_users, make_broadcast, run_loop
from tests.bots.outbound_helpers import deliver_one, ongoing_conversations, person

pytestmark = pytest.mark.django_db(transaction=True)

PER_SECOND = 3  # the bot's global bucket: three calls in any second
RELAY_USER = 61_001
AUDIENCE = range(62_001, 62_004)
# How long the staged waits may take on a loaded machine before the test gives up.
PATIENCE_SECONDS = 20.0


class RelayProcess:
    """The relay's limiter sleeps through this: its first sleep (right after it was refused
    and registered as a waiter) lasts until ``wake``; the others are real sleeps. Other
    threads' limiters sleep for real."""

    def __init__(self) -> None:
        self.thread_name = "relay"
        self.asleep = threading.Event()
        self.awake = threading.Event()

    def sleep(self, seconds: float) -> None:
        if threading.current_thread().name == self.thread_name and not self.asleep.is_set():
            self.asleep.set()
            assert self.awake.wait(PATIENCE_SECONDS), "the test never woke the relay"
            return
        time.sleep(seconds)

    def wake(self) -> None:
        self.awake.set()


class BroadcastAsks:
    """Every ``poll`` of the broadcast's send loop (the only caller of ``poll``) for a send to
    a recipient: when it started (wall clock, the same host's clock as Redis's) and what it
    got."""

    def __init__(self) -> None:
        self.asks: list[tuple[float, Permit | float]] = []
        self.lock = threading.Lock()

    def after(self, moment: float) -> list[Permit | float]:
        with self.lock:
            return [outcome for started, outcome in self.asks if started >= moment]


@pytest.fixture
def staged(bot_settings, monkeypatch):
    bot_settings.TELEGRAM_SENDS_PER_SECOND = str(PER_SECOND)
    bot_settings.TELEGRAM_SEND_BUDGET_MS = str(round(PATIENCE_SECONDS * 1000))
    # The relay is held asleep longer than a waiter stays registered without asking again
    # (1.5 s: a live caller asks every 0.5 s at most); here it must stay in the queue.
    monkeypatch.setattr(limiter_module, "WAITER_SECONDS", PATIENCE_SECONDS * 2)
    relay = RelayProcess()
    asks = BroadcastAsks()

    def outbound_limiter(config: BotConfig, bot_id: int) -> OutboundLimiter:
        return OutboundLimiter(bot_id=bot_id, limits=config.outbound_limits, sleep=relay.sleep)

    real_poll = OutboundLimiter.poll

    def poll(self, **kwargs):
        started = time.time()
        outcome = real_poll(self, **kwargs)
        if not is_group(kwargs["chat_id"]):  # not a control-message edit
            with asks.lock:
                asks.asks.append((started, outcome[0]))
        return outcome

    monkeypatch.setattr(BotConfig, "outbound_limiter", outbound_limiter)
    monkeypatch.setattr(OutboundLimiter, "poll", poll)
    return relay, asks


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.mark.slow
def test_a_live_relay_gets_the_refilled_global_bucket_before_a_waiting_broadcast(
    staged, webhook, telegram, clock, admin
):
    relay, asks = staged
    bot_id = telegram.bot.id
    threads = ongoing_conversations(
        telegram, bot_id=bot_id, now=clock.now, user_ids=range(RELAY_USER, RELAY_USER + 1)
    )
    audience = eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=AUDIENCE)
    broadcast = make_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        # The first recipient was reached by an earlier run: this run starts with a send (not
        # with the progress edit, a card-priority call into the group).
        recipients=[AUDIENCE[0] - 1, *(member.id for member in audience)],
        success_count=1,
        confirmed_at=clock.now,
    )
    telegram.forget_calls()

    # Another process's calls in flight take the whole global bucket.
    other_process = load_config().outbound_limiter(bot_id)
    held = [other_process.acquire(chat_id=70_000 + number) for number in range(PER_SECOND)]
    assert all(isinstance(permit, Permit) for permit in held)

    # A user writes: the webhook's relay is refused, registers as a live waiter and sleeps.
    update = telegram.private_message(person(telegram, RELAY_USER), text="please help")
    answered = []
    delivery = threading.Thread(
        target=lambda: answered.append(deliver_one(update)), name=relay.thread_name
    )
    delivery.start()
    assert relay.asleep.wait(PATIENCE_SECONDS), "the relay was never refused"
    # The broadcast's send loop asks for the same bucket, is refused and keeps asking.
    loop = threading.Thread(target=run_loop, args=(broadcast.id,))
    loop.start()
    try:
        _wait_for(lambda: asks.after(0), "the broadcast asking")
        assert not any(isinstance(outcome, Permit) for outcome in asks.after(0))

        # The calls end: one window later the bucket has room again.
        for permit in held:
            other_process.release(permit)
        refilled_at = time.time() + other_process.limits.window + 0.05
        # The broadcast asks for the refilled bucket while the relay is still asleep ...
        _wait_for(lambda: asks.after(refilled_at), "the broadcast asking after the refill")
        first_ask_after_refill = asks.after(refilled_at)[0]
    finally:
        # ... and the relay wakes and asks after it (at once, should anything above fail).
        relay.wake()
        delivery.join(PATIENCE_SECONDS * 2)
        loop.join(PATIENCE_SECONDS * 2)
    assert not delivery.is_alive() and not loop.is_alive()
    assert answered == [200]

    # The broadcast, though it asked first, was held back for the waiting relay ...
    assert not isinstance(first_ask_after_refill, Permit)
    # ... whose message was the first call of the two to reach Telegram.
    audience_ids = {member.id for member in audience}
    order = [
        "relay" if call.params["chat_id"] == telegram.support_chat_id else "broadcast"
        for call in telegram.calls("sendMessage")
        if call.ok
        and (
            call.params["chat_id"] in audience_ids
            or call.params.get("message_thread_id") == threads[RELAY_USER]
        )
    ]
    assert order == ["relay"] + ["broadcast"] * len(audience_ids)
    [relayed] = [message.text for message in telegram.topic_messages(threads[RELAY_USER])][1:]
    assert relayed == "please help"
    assert not Broadcast.objects.filter(id=broadcast.id, status="sending").exists()
