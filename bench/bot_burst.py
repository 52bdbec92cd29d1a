"""The support bot under a burst: N users writing at once through the webhook (issue 23).

The project's real web process (``python -m config.run prepare``, then ``python -m config.run
web`` as ``make run`` starts it; ``WEB_WORKERS`` uvicorn workers) and its Celery worker run on
the embedded PostgreSQL and Redis (database ``cpr_bench``, key prefix ``cprbench:``), pointed at
the fake Bot API (tests/fakes/telegram, in this process). This process plays Telegram's part
twice:

* the Bot API, enforcing Telegram's limits on messages (``enforce_telegram_limits``): 30 a
  second for the bot, one a second into a chat, 20 a minute into one group — beyond them a 429
  with ``retry_after``; the bot is configured with the same limits;
* the webhook delivery: every user's update POSTed at once with the secret header, at most
  ``--connections`` at a time (Telegram's default ``max_connections`` is 40); an update answered
  anything but 200 (or not answered within 60 s) is delivered again ``--redelivery-delay`` s
  later, until it is acknowledged — Telegram's retry.

Two scenarios: ``new`` users (verification off; each needs its topic created, its card posted
and its message relayed: three messages into the one support group) and ``returning`` users
(verified, topic and pinned card in place: one message into the group each). Measured: the time
from the first POST until every user's message arrived in the user's topic at the fake, against
the least time the fake's limits allow for the messages the group must take (computed from the
limits, ``theoretical_drain``); messages lost (never arrived) and duplicated (arrived twice);
429s; deliveries per update.

``--time-scale K`` divides the group's window and the chat interval by K (the fake and the bot
alike) so that a run takes minutes instead of an hour: 500 new users are 1,500 group messages,
at 20 a minute 74 minutes. ``--throughput`` instead measures the webhook updates a second of
one web worker when Telegram does not throttle (returning users, each update a new message).

    python -m bench.bot_burst [--users 500] [--scenario new|returning] [--time-scale 1]
    python -m bench.bot_burst --throughput [--duration 15] [--connections 16]

Internal step (run in a subprocess with the bench database):
``python -m bench.bot_burst populate --plan FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.stores import prepared_store_env

ROOT = Path(__file__).resolve().parent.parent
# Updates sent before the throughput clock starts (the worker opens its connections).
WARM_UP_UPDATES = 20
RESULTS = ROOT / "bench" / "results"
FIRST_USER_ID = 60_000_001
ADMIN_ID = 111111111
# Telegram's default webhook max_connections: how many deliveries it keeps in flight.
TELEGRAM_MAX_CONNECTIONS = 40
# How long Telegram waits for a webhook's answer (beyond: the delivery failed, redelivered).
DELIVERY_TIMEOUT_SECONDS = 60
BOT_TABLES = (
    "users, topics, messages, settings, processed_updates, update_inbox, delete_confirmations,"
    " broadcasts, album_items, admin_audit_log, bots"
)


@dataclass(frozen=True)
class Limits:
    """Telegram's limits on messages as the fake enforces them (and the bot keeps them)."""

    per_second: int = 30  # the bot's messages in all chats together, in any second
    chat_interval: float = 1.0  # seconds between two messages into one chat
    group_per_window: int = 20  # messages into one group in any group_window
    group_window: float = 60.0

    def scaled(self, factor: float) -> Limits:
        return Limits(
            per_second=self.per_second,
            chat_interval=self.chat_interval / factor,
            group_per_window=self.group_per_window,
            group_window=self.group_window / factor,
        )


def theoretical_drain(messages: int, limits: Limits) -> float:
    """The least time from the first to the last of ``messages`` messages into one group that
    the fake accepts without a 429: message k arrives no sooner than ``chat_interval`` after
    message k−1, ``group_window`` after message k−``group_per_window`` and one second after
    message k−``per_second`` (each limit counts the accepted arrivals in a sliding window)."""
    arrivals: list[float] = []
    for k in range(messages):
        at = 0.0
        if k >= 1:
            at = max(at, arrivals[k - 1] + limits.chat_interval)
        if k >= limits.group_per_window:
            at = max(at, arrivals[k - limits.group_per_window] + limits.group_window)
        if k >= limits.per_second:
            at = max(at, arrivals[k - limits.per_second] + 1.0)
        arrivals.append(at)
    return arrivals[-1] if arrivals else 0.0


# ------------------------------------------------------------------ inside the bench database


def populate(plan_path: str) -> None:
    """Fresh bot tables and bot keys; the bot's row; verification off (``new``) or verified
    users with their topic and pinned card (``returning``), as the plan file says."""
    import django

    from config.bootstrap import prepare

    prepare()
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone
    from django_redis import get_redis_connection

    from bots.models import BotUser, Setting, Topic
    from bots.selectors import DISABLED, VERIFY_ENABLED
    from bots.services.bots import bot_upsert

    plan = json.loads(Path(plan_path).read_text())
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(f"truncate {BOT_TABLES}")
    redis = get_redis_connection("default")
    keys = list(redis.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}bots:*", count=1000))
    for start in range(0, len(keys), 1000):
        redis.delete(*keys[start : start + 1000])
    bot_upsert(bot_id=plan["bot_id"], username="hodor_bench_bot", display_name="Hodor", now=now)
    if plan["scenario"] == "new":
        Setting.objects.create(key=VERIFY_ENABLED, value=DISABLED)
        return
    people = plan["users"]
    BotUser.objects.bulk_create(
        BotUser(
            bot_id=plan["bot_id"],
            user_id=person["id"],
            first_name=person["first_name"],
            is_verified=True,
            verified_at=now,
            first_seen_at=now,
            last_seen_at=now,
        )
        for person in people
    )
    Topic.objects.bulk_create(
        Topic(
            bot_id=plan["bot_id"],
            user_id=person["id"],
            thread_id=person["thread_id"],
            title=person["first_name"],
            pinned_msg_id=person["card_id"],
            created_at=now,
        )
        for person in people
    )


# ------------------------------------------------------------------ the processes


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the web process exited (see {log})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                if answer.status == 204:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the web process never became healthy (see {log})")


class Project:
    """The web process (and optionally the Celery worker) of one run."""

    def __init__(self, env: dict[str, str], *, workers: int, log_dir: Path, celery: bool):
        self.port = _free_port()
        self.env = {
            **env,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "WEB_WORKERS": str(workers),
        }
        self.log_dir = log_dir
        self.celery = celery
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> Project:
        subprocess.run(
            [sys.executable, "-m", "config.run", "prepare"],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        names = ["web", "worker"] if self.celery else ["web"]
        for name in names:
            log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "config.run", name],
                    cwd=ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_healthy(self.port, self.processes[0], self.log_dir / "web.log")
        return self

    def __exit__(self, *exc_info: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                process.kill()

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/webhook"


# ------------------------------------------------------------------ Telegram's delivery


@dataclass
class Delivery:
    update: dict
    attempts: int = 0
    acknowledged_at: float | None = None


async def deliver_like_telegram(
    url: str,
    secret: str,
    updates: list[dict],
    *,
    connections: int,
    redelivery_delay: float,
    statuses: Counter,
) -> list[Delivery]:
    """POST every update (``connections`` at a time); redeliver every one not answered 200
    ``redelivery_delay`` seconds later, until all are acknowledged."""
    import aiohttp

    deliveries = [Delivery(update) for update in updates]
    ready: asyncio.Queue[Delivery] = asyncio.Queue()
    for delivery in deliveries:
        ready.put_nowait(delivery)
    remaining = len(deliveries)
    done = asyncio.Event()
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret, "Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT_SECONDS)

    async def later(delivery: Delivery) -> None:
        await asyncio.sleep(redelivery_delay)
        ready.put_nowait(delivery)

    async def connection_loop(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        background = set()
        while not done.is_set():
            getting = asyncio.ensure_future(ready.get())
            finished = asyncio.ensure_future(done.wait())
            await asyncio.wait({getting, finished}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                finished.cancel()
                return
            finished.cancel()
            delivery = getting.result()
            delivery.attempts += 1
            try:
                async with session.post(
                    url, data=json.dumps(delivery.update), headers=headers
                ) as answer:
                    await answer.read()
                    status = answer.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0  # no answer: Telegram counts it as failed
            statuses[status] += 1
            if status == 200:
                delivery.acknowledged_at = time.monotonic()
                remaining -= 1
                if remaining == 0:
                    done.set()
            else:
                task = asyncio.ensure_future(later(delivery))
                background.add(task)
                task.add_done_callback(background.discard)

    # Under uvicorn's keep-alive timeout (5 s): no delivery on a connection it just closed.
    connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=4)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(connection_loop(session) for _ in range(connections)))
    return deliveries


# ------------------------------------------------------------------ the orchestrator


def _bot_env(telegram, *, limits: Limits, secret: str, budget_ms: int | None) -> dict[str, str]:
    env = {
        **os.environ,
        **prepared_store_env(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "LOG_LEVEL": "warning",
        "CPR_ADMIN_DEFAULT_PASSWORD": secrets.token_urlsafe(18),
        "TELEGRAM_API_BASE": telegram.api_base,
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_WEBHOOK_SECRET": secret,
        "ADMIN_SECRET": secrets.token_urlsafe(24),
        "SUPPORT_CHAT_ID": str(telegram.support_chat_id),
        "ADMIN_IDS": str(ADMIN_ID),
        "TELEGRAM_SENDS_PER_SECOND": str(limits.per_second),
        "TELEGRAM_CHAT_INTERVAL_MS": str(round(limits.chat_interval * 1000)),
        "TELEGRAM_GROUP_SENDS_PER_WINDOW": str(limits.group_per_window),
        "TELEGRAM_GROUP_WINDOW_SECONDS": str(max(1, round(limits.group_window))),
    }
    if budget_ms is not None:
        env["TELEGRAM_SEND_BUDGET_MS"] = str(budget_ms)
    return env


def _populate(env: dict[str, str], plan: dict) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(plan, handle)
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        subprocess.run(
            [sys.executable, "-m", "bench.bot_burst", "populate", "--plan", handle.name],
            cwd=ROOT,
            env=env,
            check=True,
        )
    finally:
        os.unlink(handle.name)


def _people(telegram, user_ids, *, returning: bool) -> tuple[list, dict]:
    """The fake's users (each a first name of their own); for returning users their topic and
    pinned card in the fake's group. Returns (users, plan entries by user id)."""
    people = [telegram.user(user_id, f"B{user_id}") for user_id in user_ids]
    telegram.met(*people)
    plan = {}
    for person in people:
        entry = {"id": person.id, "first_name": person.first_name}
        if returning:
            thread_id = telegram.create_topic_by_hand(person.first_name)
            entry["thread_id"] = thread_id
            entry["card_id"] = telegram.bot_sends(
                telegram.support_chat_id, text="card", thread_id=thread_id
            )
        plan[person.id] = entry
    return people, plan


def _text(user_id: int, round_number: int = 0) -> str:
    return f"burst {round_number} from {user_id}"


def measure_burst(
    *,
    users: int,
    scenario: str,
    time_scale: float,
    workers: int,
    connections: int,
    redelivery_delay: float,
    budget_ms: int | None,
    celery: bool,
) -> dict:
    from tests.fakes.telegram import MESSAGE_METHODS, FakeTelegram, most_in_one_second

    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "bench" / f"bot-burst-{run_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    limits = Limits().scaled(time_scale)
    secret = secrets.token_urlsafe(24)
    user_ids = range(FIRST_USER_ID, FIRST_USER_ID + users)
    returning = scenario == "returning"
    with FakeTelegram() as telegram:
        people, plan = _people(telegram, user_ids, returning=returning)
        env = _bot_env(telegram, limits=limits, secret=secret, budget_ms=budget_ms)
        _populate(
            env,
            {"bot_id": telegram.bot.id, "scenario": scenario, "users": list(plan.values())},
        )
        telegram.forget_calls()
        telegram.enforce_telegram_limits(
            per_second=limits.per_second,
            chat_interval=limits.chat_interval,
            group_per_window=limits.group_per_window,
            group_window=limits.group_window,
        )
        updates = [telegram.private_message(person, text=_text(person.id)) for person in people]
        statuses: Counter = Counter()
        with Project(env, workers=workers, log_dir=log_dir, celery=celery) as project:
            started = time.monotonic()
            deliveries = asyncio.run(
                deliver_like_telegram(
                    project.webhook_url,
                    secret,
                    updates,
                    connections=connections,
                    redelivery_delay=redelivery_delay,
                    statuses=statuses,
                )
            )
            acknowledged = time.monotonic()
            # A handed-off update may still be on its way: wait until every text arrived
            # (or nothing new arrived for a while).
            expected = {_text(user_id): user_id for user_id in user_ids}
            last_count, quiet_since = -1, time.monotonic()
            while True:
                arrived = {
                    call.params.get("text")
                    for call in telegram.calls("sendMessage")
                    if call.ok and call.params.get("chat_id") == telegram.support_chat_id
                }
                count = len(arrived & expected.keys())
                if count == users:
                    break
                if count != last_count:
                    last_count, quiet_since = count, time.monotonic()
                elif time.monotonic() - quiet_since > 30 + limits.group_window:
                    break
                time.sleep(0.5)
        group = telegram.support_chat_id
        calls = telegram.calls()
        relays = [
            call
            for call in calls
            if call.method == "sendMessage"
            and call.ok
            and call.params.get("chat_id") == group
            and call.params.get("text") in expected
        ]
        per_user = Counter(expected[call.params["text"]] for call in relays)
        threads = {topic.name: topic.thread_id for topic in telegram.topics()}
        wrong_topic = sum(
            1
            for call in relays
            if call.params.get("message_thread_id")
            != threads.get(f"B{expected[call.params['text']]}")
        )
        group_messages = [
            call
            for call in calls
            if call.method in MESSAGE_METHODS and call.params.get("chat_id") == group
        ]
        accepted_group = [call for call in group_messages if call.ok]
        needed = users * (1 if returning else 3)
        theoretical = theoretical_drain(needed, limits)
        drain = max(call.at for call in relays) - started if relays else float("nan")
        result = {
            "run": run_id,
            "scenario": scenario,
            "users": users,
            "limits": asdict(limits),
            "time_scale": time_scale,
            "web_workers": workers,
            "connections": connections,
            "redelivery_delay_seconds": redelivery_delay,
            "send_budget_ms": budget_ms,
            "celery_worker": celery,
            "group_messages_needed": needed,
            "group_messages_accepted": len(accepted_group),
            "group_messages_by_method": dict(Counter(call.method for call in accepted_group)),
            "theoretical_drain_seconds": round(theoretical, 1),
            "drain_seconds": round(drain, 1),
            "ratio": round(drain / theoretical, 3) if theoretical else None,
            "acknowledged_after_seconds": round(acknowledged - started, 1),
            "lost": sum(1 for user_id in user_ids if per_user[user_id] == 0),
            "duplicated": sum(count - 1 for count in per_user.values() if count > 1),
            "in_wrong_topic": wrong_topic,
            "refused_429": sum(1 for call in calls if call.status == 429),
            "most_group_messages_in_one_window": _most_in_window(
                [call.at for call in accepted_group], limits.group_window
            ),
            "most_calls_in_one_second": most_in_one_second(
                [call.at for call in calls if call.method in MESSAGE_METHODS and call.ok]
            ),
            "webhook_answers": {str(status): count for status, count in sorted(statuses.items())},
            "deliveries_per_update": _spread([delivery.attempts for delivery in deliveries]),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"bot-burst-{run_id}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _most_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def _spread(values: list[int]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "mean": round(sum(ordered) / len(ordered), 2),
        "median": ordered[len(ordered) // 2],
        "max": ordered[-1],
    }


def measure_throughput(*, users: int, duration: float, connections: int) -> dict:
    """Updates a second of ONE web worker, Telegram not throttling: returning users, each
    update a new message relayed into the user's topic."""
    import aiohttp

    from tests.fakes.telegram import FakeTelegram

    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "bench" / f"bot-throughput-{run_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(24)
    # No throttling anywhere: the limiter's bounds far above what one worker sends.
    limits = Limits(per_second=100_000, chat_interval=0, group_per_window=1_000_000)
    with FakeTelegram() as telegram:
        people, plan = _people(
            telegram, range(FIRST_USER_ID, FIRST_USER_ID + users), returning=True
        )
        env = _bot_env(telegram, limits=limits, secret=secret, budget_ms=None)
        env["TELEGRAM_CHAT_INTERVAL_MS"] = "0"
        _populate(
            env, {"bot_id": telegram.bot.id, "scenario": "returning", "users": list(plan.values())}
        )
        telegram.forget_calls()
        # Built beforehand so that the fake's update construction is not timed.
        rounds = max(1, int(duration * 400 / users) + 1)
        updates = [
            telegram.private_message(person, text=_text(person.id, round_number))
            for round_number in range(rounds)
            for person in people
        ]
        statuses: Counter = Counter()
        latencies: list[float] = []
        with Project(env, workers=1, log_dir=log_dir, celery=False) as project:
            url = project.webhook_url

            async def run() -> tuple[int, float]:
                headers = {
                    "X-Telegram-Bot-Api-Secret-Token": secret,
                    "Content-Type": "application/json",
                }
                bodies = iter(json.dumps(update) for update in updates)
                async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=connections)
                ) as session:
                    # Warm-up: the worker's first requests open its connections.
                    for _ in range(WARM_UP_UPDATES):
                        async with session.post(url, data=next(bodies), headers=headers) as r:
                            await r.read()
                    begin = time.monotonic()
                    end = begin + duration
                    done = 0

                    async def client() -> None:
                        nonlocal done
                        while time.monotonic() < end:
                            body = next(bodies, None)
                            if body is None:
                                return
                            sent = time.monotonic()
                            async with session.post(url, data=body, headers=headers) as answer:
                                await answer.read()
                                statuses[answer.status] += 1
                            latencies.append(time.monotonic() - sent)
                            done += 1

                    await asyncio.gather(*(client() for _ in range(connections)))
                    return done, time.monotonic() - begin

            done, elapsed = asyncio.run(run())
        relayed = [
            call
            for call in telegram.calls("sendMessage")
            if call.ok and call.params.get("chat_id") == telegram.support_chat_id
        ]
        ordered = sorted(latencies)
        result = {
            "run": run_id,
            "users": users,
            "connections": connections,
            "seconds": round(elapsed, 2),
            "updates": done,
            "updates_per_second": round(done / elapsed, 1),
            "webhook_answers": {str(status): count for status, count in sorted(statuses.items())},
            "latency_ms_p50": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
            "latency_ms_p99": round(ordered[int(len(ordered) * 0.99)] * 1000, 1)
            if ordered
            else None,
            "relayed": len(relayed),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"bot-throughput-{run_id}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _print_burst(result: dict) -> None:
    limits = result["limits"]
    print(
        f"\nbot burst: {result['users']} {result['scenario']} users writing at once through the"
        f" webhook ({result['web_workers']} web workers, {result['connections']} connections,"
        f" redelivery after {result['redelivery_delay_seconds']} s)\n"
        f"  limits (fake and bot): {limits['per_second']}/s for the bot, one per"
        f" {limits['chat_interval']:g} s into a chat, {limits['group_per_window']} per"
        f" {limits['group_window']:g} s into the group (time scale {result['time_scale']:g})\n"
        f"  {'drained' if not result['lost'] else 'NOT drained (messages lost), last arrival'}"
        f" in {result['drain_seconds']} s; the limits allow"
        f" {result['theoretical_drain_seconds']} s for {result['group_messages_needed']} group"
        f" messages: ratio {result['ratio']}\n"
        f"  lost {result['lost']}, duplicated {result['duplicated']}, in a wrong topic"
        f" {result['in_wrong_topic']}; 429s {result['refused_429']}; group messages accepted"
        f" {result['group_messages_accepted']} {result['group_messages_by_method']}\n"
        f"  webhook answers {result['webhook_answers']}, deliveries per update"
        f" {result['deliveries_per_update']}, all acknowledged after"
        f" {result['acknowledged_after_seconds']} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", default="measure", choices=["measure", "populate"])
    parser.add_argument("--plan")
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--scenario", choices=["new", "returning"], default="new")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="divide the group's window and the chat interval by this (fake and bot alike)",
    )
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=TELEGRAM_MAX_CONNECTIONS)
    parser.add_argument("--redelivery-delay", type=float, default=5.0)
    parser.add_argument("--send-budget-ms", type=int, default=None)
    parser.add_argument("--no-celery", action="store_true")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--duration", type=float, default=15.0)
    arguments = parser.parse_args()
    if arguments.step == "populate":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        populate(arguments.plan)
        return
    if arguments.throughput:
        result = measure_throughput(
            users=max(arguments.users, 1000),
            duration=arguments.duration,
            connections=arguments.connections,
        )
        print(
            f"\nwebhook throughput of ONE web worker, Telegram not throttling: "
            f"{result['updates_per_second']} updates/s ({result['updates']} updates in"
            f" {result['seconds']} s, {result['connections']} connections, returning users,"
            f" each a new message relayed)\n"
            f"  answers {result['webhook_answers']}, latency p50 {result['latency_ms_p50']} ms,"
            f" p99 {result['latency_ms_p99']} ms, relayed {result['relayed']}"
            f" (with the {WARM_UP_UPDATES} of the warm-up)"
        )
        return
    result = measure_burst(
        users=arguments.users,
        scenario=arguments.scenario,
        time_scale=arguments.time_scale,
        workers=arguments.web_workers,
        connections=arguments.connections,
        redelivery_delay=arguments.redelivery_delay,
        budget_ms=arguments.send_budget_ms,
        celery=not arguments.no_celery,
    )
    _print_burst(result)


if __name__ == "__main__":
    main()
