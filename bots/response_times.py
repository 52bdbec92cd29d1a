"""Response-time numbers for the team (issue #24), computed from the ledger (``messages``).

A **wait** starts with a user's message that follows an admin's answer (or nothing: the
conversation's first message) and ends with the next admin message in that conversation;
its length is the *time to first admin reply*. A wait still open has no end yet. Per day of the
console's time zone (``TIME_ZONE`` = ``CONSOLE_TIME_ZONE``; the day the wait started, and the day
a message was relayed): messages in and out, the
conversations that wrote, the waits started, answered and their mean and median time to first
reply. Per conversation: the same totals, and since when it waits (if it does). *Open
conversations* are the bindings whose topic is open.

Read with two queries over the period (a window function over the seed's (user_id,
created_at) index); the period is at most MAX_DAYS, and only its messages count (a message
answering one from before the period starts no wait).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from bots.models import Topic, TopicStatus

MAX_DAYS = 90

_WAITS = """
with ordered as (
    select user_id, direction, created_at,
           lag(direction) over (partition by user_id order by created_at, id) as previous
    from messages
    where bot_id = %(bot_id)s and created_at >= %(since)s and created_at < %(until)s
),
starts as (
    select user_id, created_at as asked_at
    from ordered
    where direction = 'in' and (previous is null or previous = 'out')
)
select s.user_id, s.asked_at,
       (select min(m.created_at) from messages m
        where m.bot_id = %(bot_id)s and m.user_id = s.user_id and m.direction = 'out'
          and m.created_at > s.asked_at and m.created_at < %(until)s) as answered_at
from starts s
order by s.asked_at, s.user_id
"""

_COUNTS = """
select user_id, (created_at at time zone %(zone)s)::date as day, direction, count(*)
from messages
where bot_id = %(bot_id)s and created_at >= %(since)s and created_at < %(until)s
group by 1, 2, 3
"""


@dataclass
class Figures:
    """Totals of a day or of a conversation. Seconds for the reply times."""

    messages_in: int = 0
    messages_out: int = 0
    waits: int = 0
    reply_seconds: list[float] = field(default_factory=list)
    conversations: set[int] = field(default_factory=set)
    waiting_since: datetime | None = None

    @property
    def answered(self) -> int:
        return len(self.reply_seconds)

    @property
    def mean_reply_seconds(self) -> float | None:
        return statistics.fmean(self.reply_seconds) if self.reply_seconds else None

    @property
    def median_reply_seconds(self) -> float | None:
        return statistics.median(self.reply_seconds) if self.reply_seconds else None


@dataclass(frozen=True)
class ResponseTimes:
    since: datetime
    until: datetime
    days: dict[date, Figures]  # every day of the period, oldest first
    conversations: dict[int, Figures]  # user id → figures, users who wrote or got answers
    open_conversations: int

    @property
    def total(self) -> Figures:
        total = Figures()
        for figures in self.days.values():
            total.messages_in += figures.messages_in
            total.messages_out += figures.messages_out
            total.waits += figures.waits
            total.reply_seconds += figures.reply_seconds
            total.conversations |= figures.conversations
        return total


def response_times(*, bot_id: int, until: datetime, days: int) -> ResponseTimes:
    """The figures of the ``days`` days (the console's time zone) ending with ``until``'s day
    (at most MAX_DAYS)."""
    days = max(1, min(days, MAX_DAYS))
    zone = timezone.get_default_timezone()
    last_day = until.astimezone(zone).date()
    first_day = last_day - timedelta(days=days - 1)
    since, end = _midnight(first_day, zone), _midnight(last_day + timedelta(days=1), zone)
    by_day = {first_day + timedelta(days=offset): Figures() for offset in range(days)}
    by_user: dict[int, Figures] = {}
    parameters: dict[str, Any] = {
        "bot_id": bot_id,
        "since": since,
        "until": end,
        "zone": str(zone),
    }
    with connection.cursor() as cursor:
        cursor.execute(_COUNTS, parameters)
        for user_id, day, direction, count in cursor.fetchall():
            for figures in (by_day[day], by_user.setdefault(user_id, Figures())):
                if direction == "in":
                    figures.messages_in += count
                else:
                    figures.messages_out += count
            if direction == "in":
                by_day[day].conversations.add(user_id)
        cursor.execute(_WAITS, parameters)
        for user_id, asked_at, answered_at in cursor.fetchall():
            day = by_day[asked_at.astimezone(zone).date()]
            conversation = by_user.setdefault(user_id, Figures())
            for figures in (day, conversation):
                figures.waits += 1
                if answered_at is not None:
                    figures.reply_seconds.append((answered_at - asked_at).total_seconds())
            if answered_at is None:
                conversation.waiting_since = asked_at
    open_count = Topic.objects.filter(bot_id=bot_id, status=TopicStatus.OPEN).count()
    return ResponseTimes(
        since=since,
        until=end,
        days=by_day,
        conversations=by_user,
        open_conversations=open_count,
    )


def _midnight(day: date, zone) -> datetime:
    """The first moment of ``day`` in ``zone`` (aware)."""
    return timezone.make_aware(datetime.combine(day, datetime.min.time()), zone)
