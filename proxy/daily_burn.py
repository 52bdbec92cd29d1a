"""Per-account daily burn caps (issue 25 item 5): how much an account burned today (UTC) and
whether it is over the cap its ``account_policies`` row sets.

The cap counts **tokens** (input + output, the same measure as the quota runway's burn rate and
the account pages' token counters), not dollars: a Codex account is a subscription whose quota
windows fill with use, and the price table's dollars are API list prices no one pays for it.

Today's burn is ``account_usage``'s input + output minus the row's baseline for the day
(``proxy.services.account_policies`` rolls it each minute), so the pool snapshot's one
statement (``proxy.pool_snapshot``) says with a primary-key probe per candidate until when its
cap holds it back (``DAILY_BURN_CAPPED_UNTIL_SQL``: the next 00:00 UTC), and each request
leaves out the accounts held back at its own moment. The snapshot is read again whenever
``account_usage`` or ``account_policies`` changes (their triggers move its version). Until the
new day's baseline is rolled (at most a minute past 00:00 UTC) the account counts as under its
cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from proxy.domain.key_policy import day_start, next_day_start
from telemetry.queries.buckets import bucket_account_tokens

# Whether the candidate ``a`` (joined with its ``account_usage`` as ``u``) is over its daily
# burn cap on the UTC day of the statement's ``%(now)s`` parameter. An anti-join on the policy's
# primary key: an account without a policy costs one index probe.
OVER_DAILY_CAP_SQL = """exists (
       select 1 from account_policies ap
       where ap.account_id = a.id
         and ap.burn_day = (%(now)s at time zone 'UTC')::date
         and coalesce(u.input_tokens + u.output_tokens, 0) - ap.burn_baseline_tokens
             >= ap.daily_burn_cap_tokens)"""

# The next 00:00 UTC when the candidate is over its cap on the day of ``%(now)s``, else null.
DAILY_BURN_CAPPED_UNTIL_SQL = (
    "case when "
    + OVER_DAILY_CAP_SQL
    + " then ((%(now)s at time zone 'UTC')::date + 1)::timestamp at time zone 'UTC' end"
)

_BURNS_SQL = (
    """
select a.id, ap.daily_burn_cap_tokens, ap.burn_day = (%(now)s at time zone 'UTC')::date,
       greatest(0, coalesce(u.input_tokens + u.output_tokens, 0) - ap.burn_baseline_tokens),
       """
    + OVER_DAILY_CAP_SQL
    + """
from accounts a
left join account_usage u on u.account_id = a.id
left join account_policies ap on ap.account_id = a.id
where a.id = any(%(ids)s)
"""
)


@dataclass(frozen=True)
class DailyBurn:
    """One account's burn today (UTC): ``cap_tokens`` None = uncapped; ``over_cap`` is the
    scheduler's own verdict; ``resumes_at`` = the next 00:00 UTC when over it."""

    cap_tokens: int | None
    burned_tokens: int
    over_cap: bool
    resumes_at: datetime | None

    def as_item(self, *, iso) -> dict:
        """The admin API's block (``iso`` formats the time)."""
        return {
            "dailyBurnCapTokens": self.cap_tokens,
            "burnedTodayTokens": self.burned_tokens,
            "overCap": self.over_cap,
            "resumesAt": iso(self.resumes_at),
        }


def daily_burns(account_ids: list[str], *, now: datetime) -> dict[str, DailyBurn]:
    """The burn of each of ``account_ids`` today: from its policy's baseline when rolled for
    today (the figure the scheduler compares), else from today's 15-minute buckets. Two
    queries, whatever the number of accounts."""
    if not account_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_BURNS_SQL, {"now": now, "ids": list(account_ids)})
        rows = cursor.fetchall()
    unrolled = [row[0] for row in rows if not row[2]]
    from_buckets = bucket_account_tokens(start=day_start(now), account_ids=unrolled)
    burns = {}
    for account_id, cap, rolled, burned, over in rows:
        burned = int(burned) if rolled else from_buckets.get(account_id, 0)
        burns[account_id] = DailyBurn(
            cap_tokens=cap,
            burned_tokens=burned,
            over_cap=bool(over),
            resumes_at=next_day_start(now) if over else None,
        )
    return burns
