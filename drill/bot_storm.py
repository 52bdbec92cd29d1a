"""Part 2: the support bot under a redelivery storm.

Many users each write several messages; every update is POSTed to the webhook ``copies`` times
at once, and redelivered like Telegram does (growing pauses) until it is answered 200, while
the fake Bot API fails one call in twelve with a 429 (retry after 1 s) or a
5xx (nothing applied, as Telegram does). Mid-storm the first round terminates the database's
PostgreSQL connections and flushes the Redis database; the second SIGKILLs a web worker.
What a webhook could not finish is left in the inbox (issue 36) and finished by the Celery
worker: the part waits for the inbox to be empty before it looks.

Then (seed 000): every message is in its user's topic exactly once, each user has one topic
(in Telegram and in ``topics``), each message has one ``messages`` (ledger) row, and
``processed_updates`` says processed for every update — the ledger and the claims agree.
A SIGKILL between a relay and its ledger row may relay a message twice on its take-over (the
accepted at-least-once cost the relay documents); such duplicates are counted on their own.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import time
from collections import Counter

import aiohttp

from drill.report import Part
from drill.secrets_scan import Scanner
from drill.system import System
from tests.fakes.telegram import BOT_ID

FAULT_EVERY_CALLS = 12
REDELIVERY_PAUSES = (1, 2, 4, 8, 15)  # seconds, then 15 s until the deadline
DEADLINE_SECONDS = 200  # a claim left by a failed attempt is taken over after 60 s
# The inbox's retries: a failed attempt is tried again a minute later (the faults stop with
# the storm), a killed holder's lease lapses after 60 s, the beat sweep runs every 15 s.
INBOX_DEADLINE_SECONDS = 300
IN_FLIGHT = 24  # webhook requests at once (each holds a web thread and a connection)


class Storm:
    def __init__(self, system: System, scanner: Scanner, *, copies: int) -> None:
        self.system = system
        self.scanner = scanner
        self.copies = copies
        self.answers: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.acknowledged: set[int] = set()
        self.first_round_done = 0
        self.deliveries = 0
        self.store_faults = 0
        self.cut_updates: set[int] = set()

    async def _deliver(self, session: aiohttp.ClientSession, update: dict) -> bool:
        async with self.gate:
            return await self._post(session, update)

    async def _post(self, session: aiohttp.ClientSession, update: dict) -> bool:
        headers = {"X-Telegram-Bot-Api-Secret-Token": self.system.webhook_secret}
        self.deliveries += 1
        try:
            async with session.post(
                f"{self.system.base}/telegram/webhook", json=update, headers=headers
            ) as response:
                body = await response.read()
                self.scanner.response("/telegram/webhook", dict(response.headers), body)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            self.answers[type(error).__name__] += 1
            self.cut_updates.add(update["update_id"])  # its worker died under it
            return False
        self.answers[str(status)] += 1
        if status == 500 and b"temporary_failure" in body:
            return False  # the documented "deliver again later"
        if status != 200:
            self.unexpected.append(f"{status}: {body[:120]!r}")
            return False
        return True

    async def _one(self, session, update: dict, started: float) -> None:
        results = await asyncio.gather(
            *(self._deliver(session, update) for _ in range(self.copies))
        )
        self.first_round_done += 1
        pauses = iter(REDELIVERY_PAUSES)
        while not any(results) and time.monotonic() - started < DEADLINE_SECONDS:
            await asyncio.sleep(next(pauses, REDELIVERY_PAUSES[-1]))
            results = [await self._deliver(session, update)]
        if any(results):
            self.acknowledged.add(update["update_id"])

    async def run(self, updates: list[dict], *, kill_worker: bool) -> dict:
        self.gate = asyncio.Semaphore(IN_FLIGHT)
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            faults = asyncio.create_task(self._inject_faults())
            fault = self._kill_when if kill_worker else self._break_stores_when
            struck = asyncio.create_task(fault(len(updates) // 3))
            await asyncio.gather(*(self._one(session, update, started) for update in updates))
            faults.cancel()
            self.system.telegram.clear_faults()
            await struck
        return {"seconds": time.monotonic() - started}

    async def _inject_faults(self) -> None:
        """One Bot API call in FAULT_EVERY_CALLS fails (at a random place within each stretch
        of that many calls): a 429 asking to retry after 1 s, or a 500/502, nothing applied."""
        chooser = random.Random(22)  # noqa: S311 - a fault schedule, not a secret
        telegram = self.system.telegram
        while True:
            status = chooser.choice((429, 429, 500, 502))
            telegram.fail_call(
                chooser.randint(1, FAULT_EVERY_CALLS),
                status=status,
                retry_after=1 if status == 429 else None,
            )
            seen = len(telegram.calls())
            while len(telegram.calls()) < seen + FAULT_EVERY_CALLS:
                await asyncio.sleep(0.05)

    async def _break_stores_when(self, done: int) -> None:
        """Mid-storm: every PostgreSQL connection of the drill database terminated, and the
        drill's Redis database flushed (limiter state, leases, caches)."""
        while self.first_round_done < done:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(_terminate_postgres, self.system)
        client = self.system.redis()
        try:
            await asyncio.to_thread(client.flushdb)
        finally:
            client.close()
        self.store_faults += 2

    async def _kill_when(self, done: int) -> None:
        while self.first_round_done < done:
            await asyncio.sleep(0.05)
        workers = await asyncio.to_thread(self.system.web_worker_pids)
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        self.store_faults += 1
        await asyncio.to_thread(self.system.wait_for_replacement, victim, len(workers))


def _terminate_postgres(system: System) -> None:
    with system.postgres() as connection:
        connection.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        )


def _inbox_waiting(system: System, update_ids: list[int]) -> int:
    with system.postgres() as connection:
        return connection.execute(
            "select count(*) from update_inbox where bot_id = %s and update_id = any(%s)",
            [BOT_ID, update_ids],
        ).fetchone()[0]


def _ledger(system: System, user_ids: list[int], update_ids: list[int]) -> dict:
    with system.postgres() as connection:
        topics = dict(
            connection.execute(
                "select user_id, count(*) from topics where bot_id = %s and user_id = any(%s)"
                " group by user_id",
                [BOT_ID, user_ids],
            ).fetchall()
        )
        threads = dict(
            connection.execute(
                "select user_id, thread_id from topics where bot_id = %s and user_id = any(%s)",
                [BOT_ID, user_ids],
            ).fetchall()
        )
        rows = connection.execute(
            "select user_id, private_msg_id, count(*) from messages where bot_id = %s"
            " and direction = 'in' and user_id = any(%s) group by user_id, private_msg_id",
            [BOT_ID, user_ids],
        ).fetchall()
        claims = Counter(
            dict(
                connection.execute(
                    "select status, count(*) from processed_updates where bot_id = %s"
                    " and update_id = any(%s) group by status",
                    [BOT_ID, update_ids],
                ).fetchall()
            )
        )
    return {"topics": topics, "threads": threads, "ledger": rows, "claims": claims}


def run(
    system: System,
    scanner: Scanner,
    *,
    users: int,
    messages: int,
    copies: int,
    kill_worker: bool,
) -> Part:
    part = Part(
        "bot redelivery storm"
        + (
            ", a web worker SIGKILLed mid-storm"
            if kill_worker
            else ", PostgreSQL connections terminated and Redis flushed mid-storm"
        )
    )
    telegram = system.telegram
    first = 70_000_001 + (100_000 if kill_worker else 0)
    people = [telegram.user(first + index, f"Drill{first + index}") for index in range(users)]
    telegram.met(*people)
    marker = secrets.token_hex(4)
    updates, texts, update_of = [], {}, {}
    for number in range(messages):
        for person in people:
            text = f"drill {marker} user {person.id} message {number}"
            update = telegram.private_message(person, text=text)
            updates.append(update)
            texts[text] = (person.id, update["message"]["message_id"])
            update_of[text] = update["update_id"]
    random.Random(7).shuffle(updates)  # noqa: S311 - an order, not a secret
    calls_before = len(telegram.calls())
    storm = Storm(system, scanner, copies=copies)
    timing = asyncio.run(storm.run(updates, kill_worker=kill_worker))
    update_ids = [update["update_id"] for update in updates]
    waiting_after_the_storm = _inbox_waiting(system, update_ids)
    deadline = time.monotonic() + INBOX_DEADLINE_SECONDS
    while _inbox_waiting(system, update_ids) and time.monotonic() < deadline:
        time.sleep(1)
    inbox_empty_after = time.monotonic() - deadline + INBOX_DEADLINE_SECONDS
    calls = telegram.calls()[calls_before:]
    injected = Counter(call.status for call in calls if call.status in (429, 500, 502))

    user_ids = [person.id for person in people]
    state = _ledger(system, user_ids, [update["update_id"] for update in updates])
    relayed = Counter(
        message.text
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.text in texts
    )
    in_own_topic = len(
        {
            message.text
            for message in telegram.bot_messages(telegram.support_chat_id)
            if message.text in texts
            and state["threads"].get(texts[message.text][0]) == message.thread_id
        }
    )
    topics_in_telegram = Counter(
        topic.name
        for topic in telegram.topics()
        if topic.name.startswith("Drill") and not topic.deleted
    )
    missing = sum(1 for text in texts if relayed[text] == 0)
    duplicate_relays = sum(count - 1 for count in relayed.values() if count > 1)
    # A relay (or a topic) whose Telegram call the killed worker had made, but not yet
    # recorded, is made again by the take-over: only updates whose delivery the kill cut.
    duplicated_unexplained = sum(
        1
        for text, count in relayed.items()
        if count > 1 and update_of[text] not in storm.cut_updates
    )
    ledger_rows = sum(count for _, _, count in state["ledger"])
    ledger_duplicates = sum(count - 1 for _, _, count in state["ledger"] if count > 1)
    users_topics = Counter(state["topics"].values())
    telegram_topics = Counter(topics_in_telegram.get(f"Drill{user_id}", 0) for user_id in user_ids)

    part.figure("users / messages / deliveries of each", f"{users} / {len(updates)} / {copies}")
    part.figure("webhook deliveries (with redeliveries)", storm.deliveries)
    part.figure("answers", dict(storm.answers))
    part.figure("Bot API faults injected (by status)", dict(injected))
    part.figure("store faults / SIGKILLs injected", storm.store_faults)
    part.figure("seconds", timing["seconds"])
    part.figure("left in the inbox after the storm", waiting_after_the_storm)
    part.figure("inbox empty after (s, from the storm's end)", inbox_empty_after)
    part.figure("acknowledged updates", f"{len(storm.acknowledged)} / {len(updates)}")
    part.figure("processed_updates by status", dict(state["claims"]))
    part.figure("messages in their topic / missing", f"{in_own_topic} / {missing}")
    part.figure("duplicate relays", duplicate_relays)
    part.figure("ledger rows (messages, in) / duplicates", f"{ledger_rows} / {ledger_duplicates}")
    part.figure("users by topic rows", dict(users_topics))
    part.figure("users by topics in Telegram", dict(telegram_topics))
    part.figure("unexpected webhook answers", len(storm.unexpected))
    for answer in storm.unexpected[:5]:
        part.note(f"unexpected answer {answer}")

    part.require(len(storm.acknowledged) == len(updates), "every update is acknowledged")
    part.require(_inbox_waiting(system, update_ids) == 0, "the inbox is empty in the end")
    part.require(missing == 0, "every message reaches its topic")
    part.require(in_own_topic == len(texts) - missing, "each message is in its user's topic")
    if kill_worker:
        part.note(
            "a relay the killed worker had sent but not recorded is sent again by the take-over"
            f" (SIGKILL's at-least-once window): {duplicate_relays} here"
        )
        part.figure("updates whose delivery the SIGKILL cut", len(storm.cut_updates))
        part.require(
            duplicated_unexplained == 0,
            "a message relayed twice is one the killed worker was relaying",
        )
    else:
        part.require(duplicate_relays == 0, "no message relayed twice")
    part.require(users_topics == Counter({1: users}), "each user has exactly one topic row")
    part.require(
        telegram_topics == Counter({1: users}) or kill_worker,
        "each user has exactly one topic in Telegram",
    )
    part.require(ledger_rows == len(texts) - missing, "one ledger row per relayed message")
    part.require(ledger_duplicates == 0, "no message has two ledger rows")
    part.require(
        state["claims"].get("processed", 0) == len(updates),
        "processed_updates says processed for every update",
    )
    part.require(not storm.unexpected, "no unexpected webhook answer")
    return part
