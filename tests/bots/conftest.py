"""Fixtures of the support bot's tests: the fake Bot API, the bot's settings, a movable clock and
a webhook client that posts real HTTP requests through Django's test client."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone
from django_redis import get_redis_connection

from bots.models import Bot
from tests.conftest import BOT_DELETES_PER_SECOND
from tests.fakes.telegram import FakeTelegram, FakeUser

ADMIN_ID = 111111111
SECOND_ADMIN_ID = 222222222
WEBHOOK_SECRET = "test-webhook-secret-0123456789"
ADMIN_SECRET = "test-admin-secret-9876543210"
START = datetime(2026, 10, 1, 12, 0, tzinfo=UTC)
# The pinned card of the default ``user`` (Bob), verified, first seen at START.
CARD_BOB = (
    "昵称：Bob Stone (@bob)\n用户 ID：5001\n首次对话：2026-10-01 12:00 (UTC)\n验证状态：✅ 已验证"
)


@pytest.fixture
def telegram():
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_bot_redis_keys():
    """Redis is not rolled back between tests like the database: the bot's keys a test left
    (a queued purge's lock, a wipe prompt's decision — the fake reuses message and callback
    ids from test to test) must not leak into the next test."""
    yield
    redis = get_redis_connection("default")
    keys = list(redis.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}bots:*", count=1000))
    if keys:
        redis.delete(*keys)


class QueuedDrains:
    """Stands in for Celery's broker for the inbox's nudges (``bots.pipeline.inbox_queue``):
    the drains the code queued, as (task name, kwargs, countdown). A test runs the worker's
    body itself (``Inbox.drain``); tests with a real worker process route them to it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict, float | None]] = []

    def send_task(self, name: str, *, kwargs: dict, countdown: float | None = None) -> None:
        self.sent.append((name, kwargs, countdown))


@pytest.fixture(autouse=True)
def queued_drains(monkeypatch) -> QueuedDrains:
    from bots.pipeline import inbox_queue

    drains = QueuedDrains()
    monkeypatch.setattr(inbox_queue, "current_app", drains)
    return drains


@pytest.fixture
def bot_settings(settings, telegram):
    """The bot's environment as the original's test suite pins it, pointed at the fake."""
    settings.TELEGRAM_API_BASE = telegram.api_base
    settings.TELEGRAM_BOT_TOKEN = telegram.token
    settings.TELEGRAM_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.ADMIN_SECRET = ADMIN_SECRET
    settings.SUPPORT_CHAT_ID = str(telegram.support_chat_id)
    settings.ADMIN_IDS = f"{ADMIN_ID},{SECOND_ADMIN_ID}"
    settings.MAX_ATTEMPTS = "3"
    settings.MAX_MESSAGES_PER_MINUTE = "20"
    settings.VERIFY_TTL_HOURS = "0"
    settings.WELCOME_TEXT = None
    settings.TURNSTILE_SITE_KEY = None
    settings.TURNSTILE_SECRET_KEY = None
    settings.PUBLIC_BASE_URL = None
    # Never Cloudflare's real Siteverify from a test: a closed local port unless a test points
    # it at the fake (``turnstile_settings``).
    settings.TURNSTILE_VERIFY_URL = "http://127.0.0.1:9/turnstile/v0/siteverify"
    settings.TELEGRAM_DELETES_PER_SECOND = BOT_DELETES_PER_SECOND
    # The shared outbound limiter with room to spare, so tests that are not about pacing run
    # at full speed (tests about it set Telegram's limits, or scaled ones, themselves).
    settings.TELEGRAM_SENDS_PER_SECOND = "1000"
    settings.TELEGRAM_CHAT_INTERVAL_MS = "0"
    settings.TELEGRAM_GROUP_SENDS_PER_WINDOW = "100000"
    settings.TELEGRAM_GROUP_WINDOW_SECONDS = "60"
    settings.TELEGRAM_SEND_BUDGET_MS = "5000"
    return settings


@dataclass
class Clock:
    """The time django.utils.timezone.now() answers while a test runs; tests move it."""

    now: datetime

    def advance(self, *, outbound_limiter: bool = True, **delta: float) -> datetime:
        """Move the clock; the shared outbound limiter, which reads Redis's own clock, sees the
        time pass too: its keys that would have expired by then are gone (a learned
        retry_after lasts exactly as long as its key). ``outbound_limiter=False`` leaves the
        limiter on real time — for tests whose fake Telegram enforces its limits on real time
        too (expiring a 429's block early would let calls into the block the fake still
        holds)."""
        step = timedelta(**delta)
        self.now += step
        if outbound_limiter:
            _expire_outbound_keys(within_ms=step.total_seconds() * 1000)
        return self.now

    def limiter_forgets(self, **delta: float) -> None:
        """The shared outbound limiter sees ``delta`` pass (its keys expiring by then are gone)
        without the clock moving: for a test that moved the clock in steps shorter than a
        learned retry_after."""
        _expire_outbound_keys(within_ms=timedelta(**delta).total_seconds() * 1000)


def _expire_outbound_keys(*, within_ms: float) -> None:
    redis = get_redis_connection("default")
    for key in redis.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}bots:outbound:*", count=1000):
        if 0 <= redis.pttl(key) <= within_ms:
            redis.delete(key)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(START)
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    return clock


@pytest.fixture
def bot_row(db, telegram):
    """The ``bots`` row setwebhook writes (tests of setwebhook itself start without it)."""
    return Bot.objects.create(
        bot_id=telegram.bot.id, username="hodor_test_bot", display_name="Hodor", created_at=START
    )


class Inbox:
    """The inbox's worker, run in the test's process on the test's clock (``drain_inbox``, the
    Celery task's body)."""

    def __init__(self, bot_id: int, clock: Clock) -> None:
        self.bot_id = bot_id
        self.clock = clock

    def drain(self, *, seconds: float = 30.0) -> int:
        """Work on every update that is due now; how many attempts were made."""
        from bots.pipeline.inbox_work import drain_inbox

        report = drain_inbox(
            bot_id=self.bot_id, clock=lambda: self.clock.now, drain_seconds=seconds
        )
        return report.worked

    def waiting(self) -> list[int]:
        """The update ids the inbox holds, oldest first."""
        from bots.models import InboxUpdate

        return list(InboxUpdate.objects.order_by("update_id").values_list("update_id", flat=True))

    def later(self, *, outbound_limiter: bool = True, **delta: float) -> int:
        """Move the clock (``Clock.advance``), then drain (a row given back is due again after
        its wait)."""
        self.clock.advance(outbound_limiter=outbound_limiter, **delta)
        return self.drain()


@pytest.fixture
def inbox(bot_settings, telegram, clock) -> Inbox:
    return Inbox(telegram.bot.id, clock)


class Webhook:
    """Deliver updates to ``POST /telegram/webhook`` the way Telegram does."""

    def __init__(self, client):
        self._client = client

    def deliver(self, update: dict, *, secret: str | None = WEBHOOK_SECRET):
        headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
        return self._client.post(
            "/telegram/webhook",
            data=json.dumps(update),
            content_type="application/json",
            headers=headers,
        )

    def deliver_ok(self, update: dict) -> None:
        response = self.deliver(update)
        assert response.status_code == 200, response.content
        assert response.json() == {"status": "ok"}


def deliver_during_held_call(telegram, method: str, first: dict, second: dict):
    """Overlap two deliveries: ``first`` runs in a thread until its ``method`` call reaches the
    fake Telegram and is held there; ``second`` is delivered meanwhile, then the hold is
    released. Returns both responses (first, second)."""
    hold = telegram.hold(method)
    responses = {}

    def deliver_first() -> None:
        try:
            responses["first"] = Webhook(Client()).deliver(first)
        finally:
            connections.close_all()  # the thread's own database connection

    racer = threading.Thread(target=deliver_first)
    racer.start()
    try:
        assert hold.wait_until_arrived(10), f"{method} of the first delivery never arrived"
        responses["second"] = Webhook(Client()).deliver(second)
    finally:
        hold.release()
        racer.join(30)
    return responses["first"], responses["second"]


@pytest.fixture
def webhook(client, bot_settings, bot_row, clock):
    return Webhook(client)


@pytest.fixture
def admin(telegram) -> FakeUser:
    return telegram.user(ADMIN_ID, "Alice", username="alice_support")


@pytest.fixture
def member(telegram) -> FakeUser:
    """A member of the support group who is not in ADMIN_IDS."""
    return telegram.user(333333333, "Mallory")


@pytest.fixture
def user(telegram) -> FakeUser:
    """The user a test follows: Bob, with a last name and a username (modules about other
    users override this fixture with their own)."""
    return telegram.user(5001, "Bob", last_name="Stone", username="bob")


# ------------------------------------------------------------------ Turnstile verification

PUBLIC_BASE_URL = "https://support.example.com"


@pytest.fixture
def turnstile():
    """The fake Cloudflare Turnstile (widget script, widget frame, Siteverify)."""
    from tests.fakes.turnstile import FakeTurnstile

    with FakeTurnstile() as fake:
        yield fake


@pytest.fixture
def turnstile_settings(bot_settings, turnstile):
    """The bot in Turnstile mode's configuration: both keys, the fake's URLs, a public origin.
    (The mode itself is a database switch: ``set_switches(verify_mode="turnstile")``.)"""
    bot_settings.TURNSTILE_SITE_KEY = turnstile.site_key
    bot_settings.TURNSTILE_SECRET_KEY = turnstile.secret_key
    bot_settings.TURNSTILE_VERIFY_URL = turnstile.siteverify_url
    bot_settings.TURNSTILE_SCRIPT_URL = turnstile.script_url
    bot_settings.PUBLIC_BASE_URL = PUBLIC_BASE_URL
    return bot_settings
