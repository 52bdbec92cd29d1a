"""The per-request ledger (spec §7.1), written after the response has ended.

Nothing here runs before the last byte reached the client: a finished request hands its
``LedgerEntry`` (``proxy.dispatch.ledger_entries``) to the loop's ``LedgerWriter``, which
writes batches from a worker thread. A telemetry failure is logged and never reaches the client.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.utils import timezone

from proxy import redis_keys
from proxy.dispatch.cookies import store_cookies
from proxy.dispatch.ledger_entries import (  # noqa: F401 - the views build entries through here
    LedgerEntry,
    build_compact_entry,
    build_entry,
)
from proxy.loop_resources import PerLoop, async_redis
from proxy.quota import passive_quota_sync
from proxy.services.account_usage import account_usage_add, account_usage_add_many
from telemetry.services.ledger import ledger_write_batch, ops_error_log_create, usage_record_create

logger = logging.getLogger(__name__)
FLUSH_INTERVAL_SECONDS = 0.05
MAX_BATCH = 500


class LedgerWriter:
    """Collects finished requests and writes them in batches from one worker thread.

    Every ``FLUSH_INTERVAL_SECONDS`` the pending entries go to the database in one transaction
    (each fact still commits together with its bucket change, seed §5.2) and the account
    counters in one statement of their own. If the batch is rejected (a CHECK, a deleted
    account) its rows are written one by one, so a bad row costs only itself.
    """

    def __init__(self) -> None:
        self._pending: list[LedgerEntry] = []
        self._task: asyncio.Task | None = None

    def submit(self, entry: LedgerEntry) -> None:
        self._pending.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_INTERVAL_SECONDS)
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            await write_batch(batch)

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


# This event loop's writer (plain data, created on first use).
_writers: PerLoop[LedgerWriter] = PerLoop(LedgerWriter)


def schedule(entry: LedgerEntry) -> None:
    """Hand ``entry`` to this loop's writer; the caller returns (or ends its stream) at once."""
    _writers.get_or_create().submit(entry)


async def await_pending_writes() -> None:
    """Wait until everything submitted so far is written (tests, and graceful shutdown)."""
    await _writers.get_or_create().flush()


async def write_batch(batch: list[LedgerEntry]) -> None:
    try:
        await sync_to_async(_write_batch_in_thread, thread_sensitive=False)(batch)
    except Exception:
        logger.exception("telemetry write failed; the client responses were not affected")
    await _write_extras(batch)


def _write_batch_in_thread(batch: list[LedgerEntry]) -> None:
    now = timezone.now()
    usage_facts = [entry.usage for entry in batch if entry.usage is not None]
    if not settings.TELEMETRY_ENABLED:
        usage_facts = []
    error_facts = [error for entry in batch for error in entry.errors]
    counters = [item for entry in batch for item in entry.account_usage]
    try:
        try:
            if usage_facts or error_facts:
                ledger_write_batch(usage_facts=usage_facts, error_facts=error_facts)
        except Exception:
            logger.warning("ledger batch rejected; writing its rows one by one", exc_info=True)
            for fact in error_facts:
                _logged(ops_error_log_create, fact)
            for fact in usage_facts:
                _logged(usage_record_create, fact)
        try:
            account_usage_add_many(increments=counters, now=now)
        except Exception:
            # An account may have been deleted meanwhile (foreign key): keep the others.
            for account_id, increment in counters:
                _logged(
                    account_usage_add,
                    {"account_id": account_id, "increment": increment, "now": now},
                )
    finally:
        # Return this thread's connection to the pool (no request cycle will do it).
        connection.close()


def _logged(write, arguments: dict) -> None:
    try:
        write(**arguments)
    except Exception:
        logger.warning("telemetry row not written by %s", write.__name__, exc_info=True)


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
                await store_cookies(account_id, cookies, now=now)
            except Exception:
                logger.warning("could not store upstream cookies", exc_info=True)
        if entry.quota_sync is not None:
            account_id, headers = entry.quota_sync
            newest_quota.pop(account_id, None)  # keep insertion order = newest last
            newest_quota[account_id] = headers
    for account_id, headers in newest_quota.items():
        try:
            await passive_quota_sync(account_id, headers, now=now)
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
    if previous is not None and previous.decode() == etag:
        return False
    from proxy.tasks import refresh_models_task

    # A short delay lets a burst of answers carrying the same new etag settle (250 ms debounce).
    await sync_to_async(refresh_models_task.apply_async, thread_sensitive=False)(countdown=0.25)
    return True
