"""Part 2c: the support bot's inbox (issue 36) with its holders killed while updates wait.

Users write several messages each (one conversation each, their order known); every update is
delivered ONCE, as Telegram does when it is answered 200 (an answer that never came — a web
worker killed mid-request — is delivered again, as Telegram would). One user's updates are
delivered one after the other, the next once the one before was answered, all users at once:
Telegram's order is the order of delivery, and two updates of one chat arriving at the same
moment over two connections have none (each would be handled as it is stored). A 429 with a long
``retry_after`` in the support group makes the webhooks leave the updates in the inbox, and
while they wait the part kills, in three rounds:

* **web** — the web process SIGKILLed (its uvicorn supervisor and every worker) while its
  requests hold leases on their updates, then started again;
* **worker** — the Celery worker SIGKILLed (its whole process group) while it drains the inbox,
  then started again;
* **redis** — the Redis server SIGKILLed and started again empty: the queued drain nudges, the
  limiter, the leases' companions are gone; the inbox rows in PostgreSQL are not.

Then (seed 000, issue 36): every message is in its user's topic exactly once and in the order it
was sent, each user has one topic, each message one ledger row, ``processed_updates`` says
processed for every update, and the inbox is empty. No Bot API call is in flight at a kill (the
group is blocked by the 429), so nothing may be relayed twice.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter, defaultdict

import aiohttp

from drill.report import Part
from drill.secrets_scan import Scanner
from drill.system import System
from tests.fakes.telegram import BOT_ID

# The group is blocked this long (Telegram's retry_after), so that updates wait in the inbox:
# shorter than the webhook's 5 s budget in the web round (its requests wait for the permit,
# holding their updates' leases, when the web process is killed), longer in the others (the
# webhooks leave everything to the worker, which takes a row back within 10 s and waits for
# the rest of the block holding its lease).
BLOCK_SECONDS = {"web": 4, "worker": 20, "redis": 12}
IN_FLIGHT = 24  # webhook requests at once (Telegram's max_connections is 40)
# A killed holder's lease lapses after 60 s, and the beat sweep runs every 15 s.
DEADLINE_SECONDS = 240
REDELIVERY_PAUSES = (2, 5, 10, 20)
ROUNDS = ("web", "worker", "redis")


class Deliveries:
    """Telegram's side: each update POSTed once; again only when no answer came (or not 200)."""

    def __init__(self, system: System, scanner: Scanner) -> None:
        self.system = system
        self.scanner = scanner
        self.answers: Counter[str] = Counter()
        self.redelivered = 0
        self.acknowledged: set[int] = set()
        self.slowest = 0.0

    async def _post(self, session: aiohttp.ClientSession, update: dict) -> bool:
        headers = {"X-Telegram-Bot-Api-Secret-Token": self.system.webhook_secret}
        started = time.monotonic()
        try:
            async with session.post(
                f"{self.system.base}/telegram/webhook", json=update, headers=headers
            ) as response:
                body = await response.read()
                self.scanner.response("/telegram/webhook", dict(response.headers), body)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            self.answers[type(error).__name__] += 1
            return False
        self.slowest = max(self.slowest, time.monotonic() - started)
        self.answers[str(status)] += 1
        return status == 200

    async def one(self, session: aiohttp.ClientSession, update: dict) -> None:
        delivered = await self._post(session, update)
        pauses = iter(REDELIVERY_PAUSES)
        while not delivered:
            pause = next(pauses, None)
            if pause is None:
                return
            await asyncio.sleep(pause)
            self.redelivered += 1
            delivered = await self._post(session, update)
        self.acknowledged.add(update["update_id"])

    async def run(self, conversations: list[list[dict]], strike) -> None:
        """Each conversation's updates in order, one after the other; all conversations at
        once (at most IN_FLIGHT deliveries in flight)."""
        timeout = aiohttp.ClientTimeout(total=60)
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def in_order(updates: list[dict]) -> None:
            for update in updates:
                async with gate:
                    await self.one(session, update)

        async with aiohttp.ClientSession(timeout=timeout) as session:
            striking = asyncio.create_task(strike())
            await asyncio.gather(*(in_order(updates) for updates in conversations))
            await striking


def _state(system: System, user_ids: list[int], update_ids: list[int]) -> dict:
    with system.postgres() as connection:
        topics = Counter(
            dict(
                connection.execute(
                    "select user_id, count(*) from topics where bot_id = %s and user_id = any(%s)"
                    " group by user_id",
                    [BOT_ID, user_ids],
                ).fetchall()
            )
        )
        threads = dict(
            connection.execute(
                "select user_id, thread_id from topics where bot_id = %s and user_id = any(%s)",
                [BOT_ID, user_ids],
            ).fetchall()
        )
        ledger = connection.execute(
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
        waiting = connection.execute(
            "select count(*) from update_inbox where bot_id = %s and update_id = any(%s)",
            [BOT_ID, update_ids],
        ).fetchone()[0]
    return {
        "topics": topics,
        "threads": threads,
        "ledger": {(user_id, message_id): count for user_id, message_id, count in ledger},
        "claims": claims,
        "waiting": waiting,
    }


def _waiting(system: System, update_ids: list[int]) -> int:
    with system.postgres() as connection:
        return connection.execute(
            "select count(*) from update_inbox where bot_id = %s and update_id = any(%s)",
            [BOT_ID, update_ids],
        ).fetchone()[0]


def _leased(system: System, update_ids: list[int]) -> int:
    with system.postgres() as connection:
        return connection.execute(
            "select count(*) from update_inbox where bot_id = %s and update_id = any(%s)"
            " and lease_token is not null",
            [BOT_ID, update_ids],
        ).fetchone()[0]


async def _until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(condition):
            return True
        await asyncio.sleep(0.1)
    return False


def run(system: System, scanner: Scanner, *, kill: str, users: int, messages: int) -> Part:
    part = Part(f"bot inbox: the {kill} killed with updates waiting")
    telegram = system.telegram
    offset = {"web": 0, "worker": 100_000, "redis": 200_000}[kill]
    first = 80_000_001 + offset
    people = [telegram.user(first + index, f"Inbox{first + index}") for index in range(users)]
    telegram.met(*people)
    marker = secrets.token_hex(4)
    conversations: list[list[dict]] = [[] for _ in people]
    texts = {}
    for number in range(messages):
        for person, conversation in zip(people, conversations, strict=True):
            text = f"inbox {marker} user {person.id} message {number}"
            update = telegram.private_message(person, text=text)
            conversation.append(update)
            texts[text] = (person.id, number, update["message"]["message_id"])
    updates = [update for conversation in conversations for update in conversation]
    update_ids = [update["update_id"] for update in updates]
    # Telegram asks the bot to wait: the group's next message is refused with a long
    # retry_after, which the bot's limiter learns — every relay waits, in the inbox.
    block = BLOCK_SECONDS[kill]
    telegram.fail("createForumTopic", status=429, retry_after=block)
    calls_before = len(telegram.calls())
    deliveries = Deliveries(system, scanner)
    struck: dict[str, object] = {}

    async def strike() -> None:
        # Wait until updates are stored and waiting (in the web round: held by the webhooks
        # waiting out the block), then kill while they wait.
        if kill == "web":
            await _until(lambda: _leased(system, update_ids) >= max(1, users // 2), 60)
        else:
            await _until(lambda: _waiting(system, update_ids) >= max(1, users // 2), 60)
        struck["waiting at the kill"] = await asyncio.to_thread(_waiting, system, update_ids)
        if kill == "web":
            struck["leased at the kill"] = await asyncio.to_thread(_leased, system, update_ids)
            await asyncio.to_thread(system.restart_process, "web")
            struck["web back after (s)"] = await asyncio.to_thread(system.wait_healthy, 120)
        elif kill == "worker":
            # Every update answered (no webhook holds one any more), then the worker holds a
            # row, waiting out the block.
            await _until(lambda: len(deliveries.acknowledged) == len(updates), 60)
            await _until(lambda: _leased(system, update_ids) > 0, block + 10)
            struck["leased at the kill"] = await asyncio.to_thread(_leased, system, update_ids)
            await asyncio.to_thread(system.restart_process, "worker")
        else:
            await asyncio.to_thread(system.redis_server.restart, after_seconds=2)

    started = time.monotonic()
    asyncio.run(deliveries.run(conversations, strike))
    delivered_after = time.monotonic() - started
    # The rest is the inbox's: wait until it is empty (or the deadline). A process that exited
    # meanwhile is started again, as compose's restart policy does (Celery's worker may exit on
    # a lost broker: kombu fails restoring its unacknowledged messages while Redis is away).
    deadline = time.monotonic() + DEADLINE_SECONDS
    restarted: list[str] = []
    while _waiting(system, update_ids) and time.monotonic() < deadline:
        restarted += system.restart_exited()
        time.sleep(1)
    drained_after = time.monotonic() - started
    telegram.clear_faults()

    state = _state(system, [person.id for person in people], update_ids)
    relays = [
        (message.thread_id, message.text)
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.text in texts
    ]
    copies = Counter(text for _, text in relays)
    missing = [text for text in texts if copies[text] == 0]
    doubled = sum(count - 1 for count in copies.values() if count > 1)
    in_own_topic = sum(
        1 for thread, text in relays if state["threads"].get(texts[text][0]) == thread
    )
    order = defaultdict(list)
    for _, text in relays:
        user_id, number, _ = texts[text]
        order[user_id].append(number)
    out_of_order = [user for user, numbers in order.items() if numbers != sorted(numbers)]
    ledger_rows = sum(state["ledger"].values())
    ledger_doubled = sum(count - 1 for count in state["ledger"].values() if count > 1)
    calls = telegram.calls()[calls_before:]

    part.figure("users / messages each / updates", f"{users} / {messages} / {len(updates)}")
    for name, value in struck.items():
        part.figure(name, value)
    part.figure("webhook answers", dict(deliveries.answers))
    part.figure("redeliveries (answers that never came)", deliveries.redelivered)
    part.figure("slowest answer (s)", deliveries.slowest)
    part.figure("all delivered after (s)", delivered_after)
    part.figure("inbox empty after (s)", drained_after)
    part.figure("429s answered by the fake", sum(1 for call in calls if call.status == 429))
    part.figure("exited and started again (compose's restart policy)", restarted or "none")
    part.figure("processed_updates by status", dict(state["claims"]))
    part.figure(
        "messages in their topic / missing / doubled",
        f"{in_own_topic} / {len(missing)} / {doubled}",
    )
    part.figure("users whose messages came out of order", len(out_of_order))
    part.figure("ledger rows / doubled", f"{ledger_rows} / {ledger_doubled}")
    part.figure("users by topic rows", dict(Counter(state["topics"].values())))
    for text in missing[:3]:
        part.note(f"missing: {text}")

    part.require(len(deliveries.acknowledged) == len(updates), "every update is acknowledged")
    part.require(state["waiting"] == 0, "the inbox is empty in the end")
    part.require(not missing, "every message reaches its topic (nothing lost)")
    part.require(doubled == 0, "no message relayed twice")
    part.require(in_own_topic == len(relays), "each message is in its user's topic")
    part.require(not out_of_order, "each user's messages arrive in the order they were sent")
    part.require(ledger_rows == len(texts) and ledger_doubled == 0, "one ledger row per message")
    part.require(
        state["topics"] == Counter(dict.fromkeys(state["threads"], 1))
        and len(state["threads"]) == users,
        "each user has exactly one topic",
    )
    part.require(
        state["claims"].get("processed", 0) == len(updates),
        "processed_updates says processed for every update",
    )
    return part
