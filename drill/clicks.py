"""Part 2b: buttons under click storms. A broadcast's confirm (seed 000 ``broadcasts``: the
first click wins, the announcement goes out at most once), then /deluser's confirm and cancel
racing each other (``delete_confirmations``).

An admin sends ``/broadcast`` in General; then ``clicks`` presses of its confirm button, each
delivered three times at once, race each other through the webhook. The project's Celery worker
sends the announcement to every eligible user (the storms' users). Every user must receive it
exactly once, and the control message must end as completed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import aiohttp

from drill.report import Part
from drill.secrets_scan import Scanner
from drill.system import ADMIN_ID, System

ANNOUNCEMENT = "/broadcast Drill notice\nThe drill checks this arrives once."
ANNOUNCED = "📣 Drill notice"
DONE = re.compile(r"✅ ")
DEADLINE_SECONDS = 180


async def _storm(system: System, scanner: Scanner, updates: list[dict]) -> Counter:
    headers = {"X-Telegram-Bot-Api-Secret-Token": system.webhook_secret}
    answers: Counter[str] = Counter()

    async def deliver(session: aiohttp.ClientSession, update: dict) -> bool:
        async with session.post(
            f"{system.base}/telegram/webhook", json=update, headers=headers
        ) as response:
            body = await response.read()
            scanner.response("/telegram/webhook", dict(response.headers), body)
            answers[str(response.status)] += 1
            return response.status == 200

    async def one(session: aiohttp.ClientSession, update: dict) -> None:
        started = time.monotonic()
        while time.monotonic() - started < 120:
            results = await asyncio.gather(*(deliver(session, update) for _ in range(3)))
            if any(results):
                return
            await asyncio.sleep(2)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(one(session, update) for update in updates))
    return answers


def run(system: System, scanner: Scanner, *, clicks: int) -> Part:
    part = Part("broadcast confirm under a click storm")
    telegram = system.telegram
    admin = telegram.user(ADMIN_ID, "Alice", username="alice_drill")
    with system.postgres() as connection:
        eligible = [
            row[0]
            for row in connection.execute(
                "select t.user_id from topics t join users u using (bot_id, user_id)"
                " where not u.is_banned"
            ).fetchall()
        ]
    draft = telegram.group_message(admin, thread_id=None, text=ANNOUNCEMENT)
    asyncio.run(_storm(system, scanner, [draft]))
    controls = [
        message
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.thread_id is None and "b:y:" in str(message.reply_markup or "")
    ]
    if not part.require(bool(controls), "the /broadcast draft shows its control message"):
        return part
    control = controls[-1]
    confirm = next(
        button["callback_data"]
        for row in control.reply_markup["inline_keyboard"]
        for button in row
        if button["callback_data"].startswith("b:y:")
    )
    presses = [
        telegram.click(
            admin, message_id=control.message_id, data=confirm, chat_id=telegram.support_chat_id
        )
        for _ in range(clicks)
    ]
    answers = asyncio.run(_storm(system, scanner, presses))
    started = time.monotonic()
    while not DONE.match(telegram.message(telegram.support_chat_id, control.message_id).text or ""):
        if time.monotonic() - started > DEADLINE_SECONDS:
            break
        time.sleep(0.5)
    finished = DONE.match(telegram.message(telegram.support_chat_id, control.message_id).text or "")
    received = Counter(
        user_id
        for user_id in eligible
        for message in telegram.bot_messages(user_id)
        if (message.text or "").startswith(ANNOUNCED)
    )
    toasts = Counter(
        telegram.callback_answer(press["callback_query"]["id"]) or "(none)" for press in presses
    )
    part.figure("eligible users", len(eligible))
    part.figure("confirm presses / deliveries of each", f"{clicks} / 3")
    part.figure("webhook answers", dict(answers))
    part.figure("toasts shown", dict(toasts))
    part.figure("send finished (s)", time.monotonic() - started if finished else None)
    part.figure(
        "users who got it once / twice or more / never",
        (
            f"{sum(1 for n in received.values() if n == 1)}"
            f" / {sum(1 for n in received.values() if n > 1)}"
            f" / {sum(1 for user_id in eligible if received[user_id] == 0)}"
        ),
    )
    part.require(bool(finished), "the broadcast completes")
    part.require(all(count == 1 for count in received.values()), "no user gets it twice")
    part.require(len(received) == len(eligible), "every eligible user gets it")
    return part


def run_deluser(system: System, scanner: Scanner, *, clicks: int) -> Part:
    """``/deluser``'s prompt under a storm of presses of both its buttons: whichever click
    wins, the outcome is one — deleted once everywhere, or cancelled with everything intact
    (seed 000 ``delete_confirmations``: first click wins)."""
    part = Part("/deluser confirm and cancel racing")
    telegram = system.telegram
    admin = telegram.user(ADMIN_ID, "Alice", username="alice_drill")
    with system.postgres() as connection:
        user_id, thread_id = connection.execute(
            "select user_id, thread_id from topics order by user_id limit 1"
        ).fetchone()
    command = telegram.group_message(admin, thread_id=thread_id, text="/deluser")
    asyncio.run(_storm(system, scanner, [command]))
    prompts = [
        message
        for message in telegram.topic_messages(thread_id)
        if "d:yes:" in str(message.reply_markup or "")
    ]
    if not part.require(bool(prompts), "/deluser shows its prompt"):
        return part
    prompt = prompts[-1]
    data = [
        button["callback_data"]
        for row in prompt.reply_markup["inline_keyboard"]
        for button in row
        if button["callback_data"].startswith("d:")
    ]
    presses = [
        telegram.click(
            admin,
            message_id=prompt.message_id,
            data=data[index % len(data)],
            chat_id=telegram.support_chat_id,
        )
        for index in range(clicks)
    ]
    calls_before = len(telegram.calls())
    answers = asyncio.run(_storm(system, scanner, presses))
    deletes = [
        call
        for call in telegram.calls()[calls_before:]
        if call.method == "deleteForumTopic" and call.ok
    ]
    with system.postgres() as connection:
        user_rows, topic_rows, statuses = connection.execute(
            "select (select count(*) from users where user_id = %(user)s),"
            " (select count(*) from topics where user_id = %(user)s),"
            " (select array_agg(status) from delete_confirmations where user_id = %(user)s)",
            {"user": user_id},
        ).fetchone()
    topic_gone = telegram.topic(thread_id).deleted
    deleted = user_rows == 0 and topic_rows == 0
    part.figure("presses (confirm and cancel alternating) / deliveries", f"{clicks} / 3")
    part.figure("webhook answers", dict(answers))
    part.figure("outcome", "deleted" if deleted else f"kept ({statuses})")
    part.figure("deleteForumTopic calls that succeeded", len(deletes))
    if deleted:
        part.require(topic_gone and len(deletes) == 1, "a deleted user's topic went once")
    else:
        part.require(
            user_rows == 1 and topic_rows == 1 and not topic_gone and statuses == ["cancelled"],
            "a cancelled deletion leaves the user, the binding and the topic",
        )
    return part
