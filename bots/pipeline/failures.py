"""The failure policy of Telegram calls (spec §6, "Failure-policy matrix").

* ``required`` steps: a retryable error propagates (the webhook answers 500 and Telegram
  redelivers); a permanent one is logged and the step yields None (the pipeline continues or
  drops, as the caller decides).
* ``best_effort`` steps (card edits, the risk reminder): every failure is logged and swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

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
