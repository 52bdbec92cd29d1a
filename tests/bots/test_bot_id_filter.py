"""Every statement on a business table names the bot (spec §1.6), captured from full journeys: first
contact, challenge, verification, relay both ways, topic events, self-heal; every admin command.
(The Django admin's statements are checked in test_admin.py with the same helpers.)"""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.models import ProcessedUpdate, Topic
from bots.services.processed_updates import processed_update_trim
from tests.bots.helpers import make_user, solve_challenge

BUSINESS_TABLES = (
    "users",
    "topics",
    "messages",
    "processed_updates",
    "delete_confirmations",
    "broadcasts",
)
_TABLE = re.compile(r'\b(?:from|into|update|join)\s+"?(\w+)"?', re.IGNORECASE)
_BOT_CONDITION = re.compile(r'"?bot_id"?\s*=', re.IGNORECASE)


def _touches_business_table(sql: str) -> bool:
    return any(table in BUSINESS_TABLES for table in _TABLE.findall(sql))


def _names_the_bot(sql: str) -> bool:
    lowered = sql.lower()
    if lowered.lstrip().startswith("insert"):
        columns = lowered.split("values", 1)[0]
        return "bot_id" in columns
    where = lowered.split(" where ", 1)
    return len(where) == 2 and bool(_BOT_CONDITION.search(where[1]))


def test_every_business_query_of_a_full_journey_filters_by_bot_id(
    webhook, telegram, admin, member, clock
):
    user = telegram.user(9001, "Erin", username="erin")
    with CaptureQueriesContext(connection) as captured:
        webhook.deliver_ok(telegram.private_message(user, text="hi"))
        challenge = telegram.bot_messages(user.id)[-1]
        webhook.deliver_ok(telegram.click(user, message_id=challenge.message_id, data="v:99"))
        challenge = telegram.message(user.id, challenge.message_id)
        webhook.deliver_ok(
            telegram.click(
                user, message_id=challenge.message_id, data=f"v:{solve_challenge(challenge.text)}"
            )
        )
        webhook.deliver_ok(telegram.private_message(user, text="now relayed"))
        thread_id = telegram.topics()[0].thread_id
        webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="answer"))
        webhook.deliver_ok(telegram.group_message(member, thread_id=thread_id, text="/x"))
        webhook.deliver_ok(telegram.close_topic_by_hand(thread_id, by=admin))
        webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="closed?"))
        webhook.deliver_ok(telegram.private_message(user, text="reopen please"))
        telegram.delete_topic_by_hand(thread_id)
        user.first_name = "Erin B."
        webhook.deliver_ok(telegram.private_message(user, text="heal"))
        clock.advance(days=8)
        processed_update_trim(now=clock.now)

    business = [query["sql"] for query in captured if _touches_business_table(query["sql"])]
    assert len(business) > 50
    assert [sql for sql in business if not _names_the_bot(sql)] == []
    assert ProcessedUpdate.objects.count() == 0


def test_every_business_query_of_the_admin_commands_filters_by_bot_id(
    webhook, telegram, admin, member, clock
):
    user = telegram.user(9002, "Fay", username="fay")
    verified = telegram.user(9003, "Gus")
    webhook.deliver_ok(telegram.private_message(user, text="hi"))  # a pending challenge
    make_user(verified, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(verified, text="hello"))
    thread_id = Topic.objects.get(user_id=verified.id).thread_id
    unbound = telegram.create_topic_by_hand("by hand")

    def command(text: str, thread: int | None = thread_id, sender=admin) -> None:
        webhook.deliver_ok(telegram.group_message(sender, thread_id=thread, text=text))

    with CaptureQueriesContext(connection) as captured:
        for text in ("/help", "/ban", "/unban", "/note VIP", "/unnote", "/risk", "/unrisk"):
            command(text)
        command("/ban", thread=unbound)
        command("/note", thread=unbound)
        command("/verifyon")
        command("/nothing")
        command("/ban", sender=member)
        for text in (
            "/help",
            "/verifymode",
            "/verifyoff",
            "/verifyon",
            "/verifymode_button",
            "/verifymode math",
            "/verifymode_turnstile",
        ):
            command(text, thread=None)
        command("/archive")
        clock.advance(minutes=1)
        webhook.deliver_ok(telegram.private_message(verified, text="back"))

    business = [query["sql"] for query in captured if _touches_business_table(query["sql"])]
    assert len(business) > 40
    assert [sql for sql in business if not _names_the_bot(sql)] == []
