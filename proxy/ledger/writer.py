"""The per-request ledger (spec §7.1), written after the response has ended.

Nothing here runs before the last byte reached the client: a finished request hands its
``LedgerEntry`` (``proxy.ledger.entries``) to the loop's ``LedgerWriter``, which
writes batches from a worker thread. A telemetry failure is logged and never reaches the client.

A completed request's rows survive a database that goes away (seed 004 §4.7: every success is
exactly one usage_records row; §2.10: account_usage cannot be rebuilt):

* a batch is one transaction — facts, their buckets and the account counters together — so
  it lands whole or not at all, and a counter is never added twice by a retry;
* when the connection fails, the batch is retried on a fresh connection with bounded backoff
  and kept in memory (up to ``MAX_BACKLOG`` entries) while the database is down; when the
  failure may have hit the COMMIT itself, the retry first asks PostgreSQL whether that
  transaction committed (``txid_status``) instead of guessing;
* only when the database rejects the batch as invalid are its entries written one by one
  (text made storable first), so a bad row costs only itself; what is finally given up is
  logged loudly and counted (``ledger_stats()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.utils import timezone
from psycopg_pool import PoolTimeout

from proxy import redis_keys
from proxy.ledger import affinity
from proxy.ledger.entries import LedgerEntry
from proxy.loop_resources import PerLoop, async_redis
from proxy.metrics.recording import record_ledger_batch
from proxy.services.account_cookies import account_cookies_store
from proxy.services.account_quota import account_quota_sync_passive
from proxy.services.account_usage import account_usage_add_many
from telemetry.services.ledger import ledger_write_batch, storable

logger = logging.getLogger(__name__)
MAX_BATCH = 500
# Finished requests held in memory while the database is down; past this the oldest are given
# up (logged and counted) so that an outage cannot exhaust the worker's memory.
MAX_BACKLOG = 20_000
# Waits between attempts at one batch while the database fails (the last one repeats).
RETRY_DELAYS_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


@dataclass
class LedgerStats:
    """What the writers of this process did (read by ``ledger_stats``)."""

    entries_written: int = 0
    entries_given_up: int = 0
    batch_retries: int = 0


_stats = LedgerStats()


def ledger_stats() -> LedgerStats:
    """This process's ledger counters; ``entries_given_up`` above 0 means rows were lost."""
    return _stats


@dataclass
class _Unit:
    """Entries to write."""

    entries: list[LedgerEntry]
    # The transaction of an earlier attempt whose COMMIT may have reached the server before
    # the connection died, and how many of the leading entries it held: its fate is asked
    # before they are written again.
    in_doubt_transaction: int | None = None
    in_doubt_count: int = 0


@dataclass
class _Attempt:
    transaction_id: int | None = None


class LedgerWriter:
    """Collects finished requests and writes them in batches from one worker thread.

    ``LEDGER_FLUSH_INTERVAL_MS`` after the first of them (at once when ``flush`` is awaited: a
    graceful stop, a test) up to ``MAX_BATCH`` pending entries go to the database in one
    transaction. While a batch cannot be written because the database is unreachable, it
    is retried (``RETRY_DELAYS_SECONDS``) and new entries wait behind it.
    """

    def __init__(self) -> None:
        self._pending: deque[LedgerEntry] = deque()
        self._task: asyncio.Task | None = None
        self._write_now = asyncio.Event()

    @property
    def backlog(self) -> int:
        return len(self._pending)

    def submit(self, entry: LedgerEntry) -> None:
        self._pending.append(entry)
        if len(self._pending) > MAX_BACKLOG:
            _give_up([self._pending.popleft()], "the in-memory backlog is full")
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        failures = 0
        unit: _Unit | None = None
        while unit is not None or self._pending:
            if unit is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._write_now.wait(), settings.LEDGER_FLUSH_INTERVAL_MS / 1000
                    )
                count = min(MAX_BATCH, len(self._pending))
                unit = _Unit([self._pending.popleft() for _ in range(count)])
            entries = unit.entries
            unit = await write_unit(unit)
            await _publish_given_up()
            if unit is None:
                if failures:
                    logger.warning(
                        "telemetry database reachable again after %d failed attempts", failures
                    )
                    failures = 0
                record_ledger_batch(
                    len(entries), min(entry.finished_monotonic for entry in entries)
                )
                await _write_extras(entries)
                continue
            failures += 1
            _stats.batch_retries += 1
            if failures == 1:
                logger.warning(
                    "telemetry database unavailable; holding %d finished requests in memory"
                    " and retrying",
                    len(unit.entries) + len(self._pending),
                )
            await asyncio.sleep(RETRY_DELAYS_SECONDS[min(failures, len(RETRY_DELAYS_SECONDS)) - 1])

    async def flush(self) -> None:
        """Write what is pending now (no interval) and wait until it is written."""
        self._write_now.set()
        try:
            while self._task is not None and not self._task.done():
                await asyncio.shield(self._task)
        finally:
            self._write_now.clear()


# This event loop's writer (plain data, created on first use).
_writers: PerLoop[LedgerWriter] = PerLoop(LedgerWriter)


def submit(entry: LedgerEntry) -> None:
    """Hand ``entry`` to this loop's writer; the caller returns (or ends its stream) at once."""
    _writers.get_or_create().submit(entry)


async def await_pending_writes() -> None:
    """Wait until everything submitted so far is written (tests, and graceful shutdown),
    the affinity records included."""
    await _writers.get_or_create().flush()
    await affinity.await_pending_writes()


async def write_unit(unit: _Unit) -> _Unit | None:
    """Write ``unit`` from a worker thread; returns what is left to retry (None: done)."""
    try:
        return await sync_to_async(_write_unit_in_thread, thread_sensitive=False)(unit)
    except Exception:  # a bug, not the database: never let it stop the writer
        logger.exception("telemetry write failed unexpectedly")
        _give_up(unit.entries, "an unexpected error")
        return None


def _write_unit_in_thread(unit: _Unit) -> _Unit | None:
    try:
        entries = unit.entries
        if unit.in_doubt_transaction is not None:
            state = _transaction_state(unit.in_doubt_transaction)
            if state == "in progress":  # the old backend is still finishing: ask again later
                return unit
            if state == "committed":
                _stats.entries_written += unit.in_doubt_count
                entries = entries[unit.in_doubt_count :]
        return _write_entries(entries) if entries else None
    except (OperationalError, InterfaceError):
        return unit  # still unreachable (asking about the transaction failed)
    finally:
        # Return this thread's connection to the pool (no request cycle will do it); a dead
        # one is discarded there and the next checkout gets a live one.
        connection.close()


def _transaction_state(transaction_id: int) -> str | None:
    """'committed', 'aborted' or 'in progress'; None when the server cannot say (too old, or
    "in the future" on a promoted standby that never received it): not committed here.
    Raises OperationalError/InterfaceError while the database is unreachable."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("select txid_status(%s)", [transaction_id])
            return cursor.fetchone()[0]
    except DatabaseError as error:
        if _is_connection_failure(error):
            raise
        logger.warning("transaction %s unknown to the server (%s)", transaction_id, error)
        return None


def _write_entries(entries: list[LedgerEntry]) -> _Unit | None:
    """Write ``entries`` in one transaction; when the database rejects them, again with their
    text made storable, then one by one. Returns what is left when the connection fails."""
    for sanitize in (False, True):
        attempt = _Attempt()
        try:
            _write_atomically(entries, attempt, sanitize=sanitize)
            _stats.entries_written += len(entries)
            return None
        except Exception as error:
            if _is_connection_failure(error):
                return _Unit(entries, attempt.transaction_id, len(entries))
            if len(entries) == 1 and sanitize:
                _give_up(entries, type(error).__name__, exc_info=True)
                return None
            logger.warning("ledger batch rejected (%s)", type(error).__name__)
    for index, entry in enumerate(entries):
        attempt = _Attempt()
        try:
            _write_atomically([entry], attempt, sanitize=True)
            _stats.entries_written += 1
        except Exception as error:
            if _is_connection_failure(error):
                return _Unit(entries[index:], attempt.transaction_id, 1)
            _give_up([entry], type(error).__name__, exc_info=True)
    return None


# SQLSTATE classes that say "try again later", not "this row is wrong": connection exceptions,
# operator intervention (admin/crash shutdown, cannot connect now), insufficient resources,
# serialization failures and deadlocks. Other OperationalErrors (a statement timeout, an index
# row too large) refuse what was sent and must not block the queue.
_RETRYABLE_SQLSTATES = ("08", "57P", "53", "40001", "40P01")


def _is_connection_failure(error: Exception) -> bool:
    """Whether ``error`` says the database could not be talked to (retry), as opposed to it
    refusing what was sent (a CHECK, bad text, a value too large: never retried as is)."""
    raw = connection.connection
    if raw is None or raw.closed or raw.broken:
        return True
    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(cause, PoolTimeout):
        return True
    sqlstate = getattr(cause, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_RETRYABLE_SQLSTATES)


def _write_atomically(entries: list[LedgerEntry], attempt: _Attempt, *, sanitize: bool) -> None:
    """Facts, buckets and account counters of ``entries`` in ONE transaction (seed §5.2 per
    fact; the counters share it so that a retried batch cannot count twice)."""
    usage_facts = [entry.usage for entry in entries if entry.usage is not None]
    if not settings.TELEMETRY_ENABLED:
        usage_facts = []
    error_facts = [error for entry in entries for error in entry.errors]
    if sanitize:
        usage_facts = [storable(fact) for fact in usage_facts]
        error_facts = [storable(fact) for fact in error_facts]
    counters = [item for entry in entries for item in entry.account_usage]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("select txid_current()")
            attempt.transaction_id = cursor.fetchone()[0]
        if usage_facts or error_facts:
            ledger_write_batch(usage_facts=usage_facts, error_facts=error_facts)
        _add_counters(counters)


def _add_counters(counters: list) -> None:
    """The account counters of a batch; an account deleted meanwhile (its foreign key) loses
    only its own increments, inside savepoints, so the batch's facts still commit."""
    if not counters:
        return
    now = timezone.now()
    try:
        with transaction.atomic():
            account_usage_add_many(increments=counters, now=now)
        return
    except IntegrityError:
        pass
    for account_id in dict.fromkeys(account_id for account_id, _ in counters):
        own = [item for item in counters if item[0] == account_id]
        try:
            with transaction.atomic():
                account_usage_add_many(increments=own, now=now)
        except IntegrityError:
            logger.info("counters of a deleted account dropped (%d increments)", len(own))


_published_given_up = 0
GIVEN_UP_COUNTER_TTL_SECONDS = 30 * 86400


async def _publish_given_up() -> None:
    """Add this process's newly given-up entries to the Redis counter operators can read
    (``redis_keys.ledger_rows_given_up``); the log line stays the record when Redis fails."""
    global _published_given_up
    delta = _stats.entries_given_up - _published_given_up
    if delta <= 0:
        return
    _published_given_up = _stats.entries_given_up
    try:
        redis = await async_redis.get()
        key = redis_keys.ledger_rows_given_up()
        async with redis.pipeline(transaction=True) as pipe:
            # A pipeline's commands return the pipeline (redis-py's stubs say the reply).
            await (
                pipe.incrby(key, delta)
                .expire(  # type: ignore[attr-defined]
                    key, GIVEN_UP_COUNTER_TTL_SECONDS
                )
                .execute()
            )
    except Exception:
        logger.warning("could not count %d given-up ledger entries in Redis", delta)


def _give_up(entries: list[LedgerEntry], reason: str, *, exc_info: bool = False) -> None:
    """The loud end of rows that will never be written."""
    _stats.entries_given_up += len(entries)
    request_ids = [
        fact.request_id
        for entry in entries
        for fact in ([entry.usage] if entry.usage else []) + entry.errors
    ]
    logger.error(
        "telemetry rows GIVEN UP (%s): %d finished request(s), request ids %s",
        reason,
        len(entries),
        request_ids[:20],
        exc_info=exc_info,
    )


async def _write_extras(batch: list[LedgerEntry]) -> None:
    """The rare parts of a batch: captured cookies, passive quota sync, a new models etag.

    Only the newest quota headers of each account matter (a later snapshot replaces an earlier
    one), so a busy account costs one quota statement per batch, not one per request.
    """
    now = timezone.now()
    newest_quota: dict[str, dict[str, str]] = {}
    for entry in batch:
        for account_id, cookies in entry.cookies:
            try:
                await account_cookies_store(account_id=account_id, cookies=cookies, now=now)
            except Exception:
                logger.warning("could not store upstream cookies", exc_info=True)
        for account_id, headers in entry.quota_syncs:
            newest_quota.pop(account_id, None)  # keep insertion order = newest last
            newest_quota[account_id] = headers
    for account_id, headers in newest_quota.items():
        try:
            await account_quota_sync_passive(account_id, headers, now=now)
        except Exception:
            logger.warning("passive quota sync failed", exc_info=True)
    etags = [entry.models_etag for entry in batch if entry.models_etag]
    if etags:
        try:
            await note_models_etag(etags[-1])
        except Exception:
            logger.warning("could not check the models etag", exc_info=True)


_last_models_etag: str | None = None


async def note_models_etag(etag: str) -> bool:
    """Queue a model refresh when the upstream announces a models etag not seen before
    (spec §4.5); the process remembers the last one so the usual case costs nothing.
    Returns whether a refresh was queued."""
    global _last_models_etag
    if etag == _last_models_etag:
        return False
    _last_models_etag = etag
    redis = await async_redis.get()
    previous = await redis.set(redis_keys.models_etag(), etag, ex=86400, get=True)
    if isinstance(previous, bytes) and previous.decode() == etag:  # the client does not decode
        return False
    from proxy.tasks import refresh_models_task

    # A short delay lets a burst of answers carrying the same new etag settle (250 ms debounce).
    await sync_to_async(refresh_models_task.apply_async, thread_sensitive=False)(countdown=0.25)
    return True
