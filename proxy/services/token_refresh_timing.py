"""When tokens are refreshed (spec §4.1–§4.2): the jittered margin before expiry, the retry
back-off and the recovery delay, each with a stable per-account jitter (the same in every
process). Pure functions."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

FIRST_RETRY_SECONDS = 5.0
RETRY_GROWTH = 3.0
LONGEST_RETRY_SECONDS = 300.0
RETRY_JITTER = 0.30
RECOVERY_DELAY_SECONDS = 600.0
RECOVERY_JITTER = 0.20
MARGIN_JITTER_LOW, MARGIN_JITTER_SPAN = 0.85, 0.30


def stable_unit(key: str) -> float:
    """A number in [0, 1] that depends only on ``key`` (the same in every process)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / (2**64 - 1)


def jittered_margin_seconds(account_id: str, margin_seconds: int) -> float:
    """margin × (0.85 + 0.30 u), u a stable hash of the account id (spec §4.1): refreshes of
    many accounts spread out instead of all firing together."""
    return margin_seconds * (MARGIN_JITTER_LOW + MARGIN_JITTER_SPAN * stable_unit(account_id))


def retry_delay_seconds(account_id: str, attempt: int) -> float:
    """The pause before attempt ``attempt`` (2..5): 5, 15, 45, 135 s (×3, at most 300 s), each
    with a stable ±30 % jitter of its own."""
    base = min(FIRST_RETRY_SECONDS * RETRY_GROWTH ** (attempt - 2), LONGEST_RETRY_SECONDS)
    unit = stable_unit(f"{account_id}:retry:{attempt}")
    return base * (1 + RETRY_JITTER * (2 * unit - 1))


def recovery_delay_seconds(account_id: str) -> float:
    """10 minutes ±20 % (stable per account) after a refresh failed on transport only."""
    unit = stable_unit(f"{account_id}:recovery")
    return RECOVERY_DELAY_SECONDS * (1 + RECOVERY_JITTER * (2 * unit - 1))


def next_refresh_time(
    *, account_id: str, expires_at: datetime | None, margin_seconds: int, now: datetime
) -> datetime:
    """When a token that expires at ``expires_at`` is refreshed; ``now`` for an unknown expiry
    (an opaque token: refresh it to learn one)."""
    if expires_at is None:
        return now
    return expires_at - timedelta(seconds=jittered_margin_seconds(account_id, margin_seconds))
