"""What every ``/v1`` request needs besides its key — the hot runtime settings, the current
fingerprint and the candidate accounts — kept in process memory and validated on every request
by a version number read in the key's own statement (issue 23).

The version is the sum of the rows of ``pool_versions`` (migration proxy/0005). A trigger on
each table the snapshot is read from (``accounts``, ``account_usage``, ``account_cookies``,
``runtime_settings``, ``fingerprints``) adds one to a row of it in the writing transaction —
every writer, the ORM's, raw SQL's and an operator's ``psql`` alike, with no code path to
forget. Since the key lookup reads the sum in the same statement (the same MVCC snapshot), a
request that starts after a write committed sees the new version and reloads; one that
started before it behaves as it did when it read the rows itself. The client key stays one
point lookup per request (seed 004 §4.3: disabling a key takes effect at once).
``account_policies`` (proxy/0006: whether a candidate is over its daily burn cap) has the same
triggers.

The sum only grows (each bump adds one to a row; a bump that finds every row locked by other
writers inserts a new one rather than wait), so "newer" is simply "larger". Requests get
copies of the account views: the request path updates its candidates in place.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from proxy.accounts import AccountView, accounts_from_json
from proxy.clients.codex import FingerprintHeaders, render_fingerprint
from proxy.dispatch.scheduler import SchedulerSettings
from proxy.loop_resources import PerLoop, database_connection
from proxy.models_catalog import clean_aliases
from proxy.selectors import SNAPSHOT_CANDIDATES_JSON_SQL

# The expression of the current version (a handful of rows), for the key lookup's statement.
POOL_VERSION_SQL = "(select coalesce(sum(version), 0) from pool_versions)"

_FINGERPRINT_COLUMNS = (
    "originator",
    "app_version",
    "build_number",
    "platform",
    "arch",
    "chromium_version",
    "user_agent_template",
    "default_headers_json",
    "header_order_json",
)
_SNAPSHOT_SQL = (
    "select "
    + POOL_VERSION_SQL
    + """, s.model_aliases_json, s.max_concurrent_per_account, s.request_interval_ms,
       s.rotation_strategy,
       f.originator, f.app_version, f.build_number, f.platform, f.arch, f.chromium_version,
       f.user_agent_template, f.default_headers_json, f.header_order_json,
       """
    + SNAPSHOT_CANDIDATES_JSON_SQL
    + """
from (select 1) as anchor
left join runtime_settings s on s.id = 1
left join fingerprints f on f.id = 'current'
"""
)


@dataclass(frozen=True)
class PoolSnapshot:
    version: int
    aliases: dict[str, str]
    scheduler_settings: SchedulerSettings
    fingerprint: FingerprintHeaders
    accounts: tuple[AccountView, ...]
    # Per account (same order): the words of its label, for account groups.
    label_words: tuple[frozenset[str], ...]
    # Account id → until when its daily burn cap holds it back (issue 25; proxy.daily_burn).
    burn_capped_until: dict[str, datetime] = field(default_factory=dict)

    def candidates(
        self, account_group: str | None, *, now: datetime | None = None
    ) -> list[AccountView]:
        """Copies of the candidate accounts (of ``account_group`` when given), in their
        order (added_at, id), without those over their daily burn cap at ``now`` (the clock's
        time when not given)."""
        if account_group is None:
            accounts = [account.copy() for account in self.accounts]
        else:
            word = f"group:{account_group}"
            accounts = [
                account.copy()
                for account, words in zip(self.accounts, self.label_words, strict=True)
                if word in words
            ]
        if self.burn_capped_until:
            now = now or timezone.now()
            capped = self.burn_capped_until
            accounts = [a for a in accounts if a.id not in capped or capped[a.id] <= now]
        return accounts


def _snapshot_from_row(row: tuple) -> PoolSnapshot:
    version, aliases, max_concurrent, interval, strategy = row[:5]
    fingerprint_end = 5 + len(_FINGERPRINT_COLUMNS)
    fingerprint = dict(zip(_FINGERPRINT_COLUMNS, row[5:fingerprint_end], strict=True))
    if fingerprint["originator"] is None:  # not seeded yet (start-up seeds it)
        fingerprint = settings.CODEX_FINGERPRINT
    rows = row[fingerprint_end]
    words = tuple(frozenset(candidate.pop("label_words", None) or ()) for candidate in rows)
    capped = {}
    for candidate in rows:
        until = candidate.pop("burn_capped_until", None)
        if until is not None:
            capped[candidate["id"]] = datetime.fromisoformat(until)
    return PoolSnapshot(
        version=int(version),
        aliases=clean_aliases(aliases),
        scheduler_settings=SchedulerSettings(
            strategy=strategy or "smart",
            max_concurrent_per_account=max_concurrent or 3,
            request_interval_ms=interval if interval is not None else 50,
        ),
        fingerprint=render_fingerprint(fingerprint),
        accounts=tuple(accounts_from_json(rows)),
        label_words=words,
        burn_capped_until=capped,
    )


_current: PoolSnapshot | None = None
_reloading: PerLoop[asyncio.Lock] = PerLoop(asyncio.Lock)


async def pool_snapshot(version: int) -> PoolSnapshot:
    """The snapshot at ``version`` (the key lookup's reading) or newer: the one in memory, or
    read again (one statement) when it is older. Concurrent requests that find it old wait
    for one reading. Raises the database's errors (the caller maps them)."""
    global _current
    current = _current
    if current is not None and current.version >= version:
        return current
    async with _reloading.get_or_create():
        current = _current
        if current is not None and current.version >= version:
            return current
        async with database_connection() as connection:
            cursor = await connection.execute(_SNAPSHOT_SQL, {"now": timezone.now()})
            row = await cursor.fetchone()
        current = _snapshot_from_row(row)
        if _current is None or current.version >= _current.version:
            _current = current
        return current


def forget_pool_snapshot() -> None:
    """Drop the snapshot in memory (tests that rebuild the database under a running process)."""
    global _current
    _current = None
