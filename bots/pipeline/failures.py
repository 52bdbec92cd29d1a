"""The failure policy of Telegram calls (spec §6, "Failure-policy matrix").

* ``required`` steps: a retryable error propagates (the update stays in the inbox for a later
  attempt, ``bots.pipeline.inbox_work``); a permanent one is logged and the step yields None
  (the pipeline continues or drops, as the caller decides).
* ``best_effort`` steps (card edits, the risk reminder): every failure is logged and swallowed.
* ``recorded`` writes record what a Telegram call just did (the topic binding, the relay's
  ledger row): a dead connection is replaced and the write tried once more, since a later
  attempt would make the call again (a second topic, the message relayed twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection

from bots.clients.telegram import TelegramError, TelegramPermanentError

logger = logging.getLogger("bots.pipeline")

Result = TypeVar("Result")


def required(step: str, call: Callable[[], Result]) -> Result | None:
    """Run ``call``; return its result, or None after logging a permanent Telegram error.

    Raises TelegramRetryableError (and anything else) unchanged.
    """
    try:
        return call()
    except TelegramPermanentError as error:
        logger.warning("%s: permanent failure, dropped: %s", step, error)
        return None


def best_effort(step: str, call: Callable[[], Result]) -> Result | None:
    """Run ``call``; return its result, or None after logging any failure (never raises)."""
    try:
        return call()
    except TelegramError as error:
        logger.warning("%s: best-effort step failed: %s", step, error)
    except Exception:  # best effort means nothing here may fail the update
        logger.exception("%s: best-effort step failed", step)
    return None


def recorded(step: str, write: Callable[[], Result]) -> Result:
    """Run ``write``, the record of an effect Telegram has already made; when the database
    connection turns out dead (a terminated backend, a failover) run it once more on a fresh one.

    Inside a transaction nothing is retried (the transaction is lost with its connection).
    Raises whatever the second attempt raises: then the update is tried again after all.
    """
    try:
        return write()
    except (OperationalError, InterfaceError) as error:
        if connection.in_atomic_block:
            raise
        logger.warning("%s: the database connection failed (%s); writing again", step, error)
        connection.close()  # back to the pool, which hands out only live connections
        return write()
