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

The same version tells this loop's upstream WebSocket pool that accounts changed: each
snapshot a request gets is handed to it (``follow_account_statuses``), and an account whose
status moved — an operator disabling it in the admin API or the Django admin, whichever
process served that — has its pooled sockets evicted (spec §6.3). A process holding pooled
sockets but serving no requests checks the version on the pool's sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from django.conf import settings
from django.utils import timezone

from proxy.accounts import AccountView, accounts_from_json
from proxy.clients.codex import FingerprintHeaders, render_fingerprint
from proxy.clients.codex.ws_pool import WebSocketPool, on_sweep, websocket_pool
from proxy.domain.slots import SchedulerSettings
from proxy.loop_resources import (
    DATABASE_ACQUIRE_TIMEOUT_SECONDS,
    PerLoop,
    connection_is_alive,
    database_conninfo,
    on_loop_close,
)
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
    # Account id → status, for the WebSocket pools' eviction (ws_pool.follow_account_statuses).
    statuses: dict[str, str] = field(default_factory=dict)
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
    accounts = tuple(accounts_from_json(rows))
    return PoolSnapshot(
        version=int(version),
        aliases=clean_aliases(aliases),
        scheduler_settings=SchedulerSettings(
            strategy=strategy or "smart",
            max_concurrent_per_account=max_concurrent or 3,
            request_interval_ms=interval if interval is not None else 50,
        ),
        fingerprint=render_fingerprint(fingerprint),
        accounts=accounts,
        label_words=words,
        burn_capped_until=capped,
        statuses={account.id: account.status for account in accounts},
    )


_current: PoolSnapshot | None = None


class _Reader:
    """This loop's reading of the snapshot: one at a time, on a connection of its own.

    Its own connection, because under load the pool's ten are queued for by every request's
    key lookup: a reading that waited its turn there would keep every request that needs it
    waiting too (measured at c=128: readings late by seconds, requests refused with 503)."""

    def __init__(self) -> None:
        self.reading: asyncio.Task | None = None
        self._connection: psycopg.AsyncConnection | None = None

    async def read(self) -> PoolSnapshot:
        """One statement, within the database budget; a connection that died while idle (a
        failover, a terminated backend) is replaced and the statement sent once more."""
        async with asyncio.timeout(DATABASE_ACQUIRE_TIMEOUT_SECONDS):
            for attempt in (1, 2):
                try:
                    connection = await self._live_connection()
                    cursor = await connection.execute(_SNAPSHOT_SQL, {"now": timezone.now()})
                    row = await cursor.fetchone()
                    assert row is not None  # anchored on (select 1): always one row
                    return _snapshot_from_row(row)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    await self.close()
                    if attempt == 2:
                        raise
                except BaseException:
                    await self.close()  # in an unknown state: not used again
                    raise
        raise AssertionError("unreachable")

    async def version(self) -> int:
        """The current version (one small statement, within the database budget)."""
        async with asyncio.timeout(DATABASE_ACQUIRE_TIMEOUT_SECONDS):
            try:
                connection = await self._live_connection()
                cursor = await connection.execute("select " + POOL_VERSION_SQL)
                row = await cursor.fetchone()
            except BaseException:
                await self.close()
                raise
        assert row is not None  # a select of one value: always one row
        return int(row[0])

    async def _live_connection(self) -> psycopg.AsyncConnection:
        connection = self._connection
        if connection is not None and not connection_is_alive(connection):
            await self.close()
            connection = None
        if connection is None:
            connection = self._connection = await psycopg.AsyncConnection.connect(
                database_conninfo(), autocommit=True
            )
        return connection

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


_readers: PerLoop[_Reader] = PerLoop(_Reader)


async def _close_this_loops_reader() -> None:
    reader = _readers.pop()
    if reader is not None:
        await reader.close()


on_loop_close(_close_this_loops_reader)


async def pool_snapshot(version: int) -> PoolSnapshot:
    """The snapshot at ``version`` (the key lookup's reading) or newer: the one in memory, or
    read again (one statement) when it is older. Requests that find it old share one reading:
    the one in flight, and when that one turns out older than what they saw (it started before
    their key lookup), the next one, which cannot be. This loop's WebSocket pool takes in the
    snapshot's account statuses (evicting accounts that changed). Raises the database's
    errors (the caller maps them)."""
    snapshot = await _snapshot_at_least(version)
    websocket_pool.get_or_create().follow_account_statuses(snapshot.version, snapshot.statuses)
    return snapshot


async def _follow_while_serving_nothing(pool: WebSocketPool) -> None:
    """After a pool's sweep: a pool holding sockets reads the current version and, when it
    moved, the snapshot, so that a process serving no requests still evicts an account an
    operator changed elsewhere (in another process). One small statement per sweep."""
    if not pool.has_sockets():
        return
    await pool_snapshot(await _readers.get_or_create().version())


on_sweep(_follow_while_serving_nothing)


async def _snapshot_at_least(version: int) -> PoolSnapshot:
    global _current
    current = _current
    if current is not None and current.version >= version:
        return current
    reader = _readers.get_or_create()
    while True:
        reading = reader.reading
        fresh = reading is None or reading.done()
        if reading is None or reading.done():
            reading = reader.reading = asyncio.get_running_loop().create_task(reader.read())
        # Shielded: a request whose client left does not cancel the others' reading.
        snapshot = await asyncio.shield(reading)
        if _current is None or snapshot.version >= _current.version:
            _current = snapshot
        # A reading started after this request's key lookup has at least its version (the sum
        # only grows); one that started before may not.
        if snapshot.version >= version or fresh:
            return snapshot


def forget_pool_snapshot() -> None:
    """Drop the snapshot in memory (tests that rebuild the database under a running process)."""
    global _current
    _current = None
