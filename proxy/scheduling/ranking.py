"""Ranking the candidates by the rotation strategy (spec §3.4), pure: no I/O.

``rank`` gives the order and a base score per account; the scheduler's Lua call
(``proxy.scheduling.scheduler.order_and_acquire``) adds the live load term, rotates ties with
the shared cursor and takes the slot.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from proxy.accounts import AccountView

SMART_WEIGHTS = {
    "load": 1.0,
    "window_tokens": 0.8,
    "window_cached": 0.05,
    "window_requests": 0.6,
    "error_rate": 1.0,
    "first_token": 0.5,
    "reset": 0.0,
}
QUOTA_PENALTY = 1000.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _inverse_share(values: Sequence[float]) -> list[float]:
    """1 − x/max for each x; a degenerate range (max 0) normalises to 1.0 (spec §3.4)."""
    largest = max(values) if values else 0
    if largest <= 0:
        return [1.0 for _ in values]
    return [1.0 - value / largest for value in values]


def smart_base_scores(accounts: Sequence[AccountView]) -> list[float]:
    """Every smart factor except load (which Redis adds from live slot counts).

    The error-rate and time-to-first-token EWMAs have no samples yet and count as neutral 1.0.
    """
    tokens = _inverse_share([account.window_tokens for account in accounts])
    cached = _inverse_share([account.window_cached_tokens for account in accounts])
    requests = _inverse_share([account.window_request_count for account in accounts])
    scores = []
    for index, account in enumerate(accounts):
        score = (
            SMART_WEIGHTS["window_tokens"] * tokens[index]
            + SMART_WEIGHTS["window_cached"] * cached[index]
            + SMART_WEIGHTS["window_requests"] * requests[index]
            + SMART_WEIGHTS["error_rate"] * 1.0
            + SMART_WEIGHTS["first_token"] * 1.0
        )
        if account.quota_limit_reached:
            score -= QUOTA_PENALTY
        scores.append(score)
    return scores


def _quota_reset_compare(first: AccountView, second: AccountView) -> int:
    if first.quota_limit_reached != second.quota_limit_reached:
        return 1 if first.quota_limit_reached else -1
    if (
        first.window_reset_at
        and second.window_reset_at
        and first.window_reset_at != second.window_reset_at
    ):
        return -1 if first.window_reset_at < second.window_reset_at else 1
    if first.request_count != second.request_count:
        return -1 if first.request_count < second.request_count else 1
    first_used, second_used = first.last_used_at, second.last_used_at
    if first_used != second_used:
        if first_used is None:
            return -1
        if second_used is None:
            return 1
        return -1 if first_used < second_used else 1
    return 0


@dataclass(frozen=True)
class Ranking:
    """Candidates in rank order with a base score each; equal scores are ties."""

    accounts: list[AccountView]
    base_scores: list[float]
    load_weight: float
    rotate_ties: bool


def rank(accounts: list[AccountView], strategy: str) -> Ranking:
    """Order candidates by ``strategy`` (spec §3.4)."""
    if strategy == "sticky":
        # Most recently used first; never-used last; equal times keep their order (stable).
        ordered = sorted(
            accounts,
            key=lambda account: (account.last_used_at is not None, account.last_used_at or _EPOCH),
            reverse=True,
        )
        return Ranking(ordered, [-float(index) for index in range(len(ordered))], 0.0, False)
    if strategy == "quota_reset_priority":
        ordered = sorted(accounts, key=functools.cmp_to_key(_quota_reset_compare))
        scores, group = [], 0
        for index, account in enumerate(ordered):
            if index and _quota_reset_compare(ordered[index - 1], account) != 0:
                group += 1
            scores.append(-float(group))
        return Ranking(ordered, scores, 0.0, True)
    if strategy == "round_robin":
        return Ranking(list(accounts), [0.0] * len(accounts), 0.0, True)
    # smart (the default)
    return Ranking(list(accounts), smart_base_scores(accounts), SMART_WEIGHTS["load"], True)
