"""Plan → model list cache (seed 004 §4B.4): one HASH, always replaced as a whole."""

from __future__ import annotations

import json
from typing import Any

from proxy import redis_keys
from proxy.runtime_state import redis_client


def model_snapshots_replace(snapshots: dict[str, dict[str, Any]]) -> None:
    """Replace the whole hash atomically (MULTI: DEL + HSET).

    A plan that disappeared upstream disappears here too; readers never see a half-written
    set. Each value is a complete JSON object ``{"models": [...], "fetchedAt": "..."}``.
    """
    key = redis_keys.models_plan_snapshots()
    pipeline = redis_client().pipeline(transaction=True)
    pipeline.delete(key)
    if snapshots:
        pipeline.hset(
            key, mapping={plan: json.dumps(snapshot) for plan, snapshot in snapshots.items()}
        )
    pipeline.execute()


def model_snapshots_get_all() -> dict[str, dict[str, Any]]:
    """Every plan's snapshot; empty when never fetched (or after a FLUSHALL)."""
    raw = redis_client().hgetall(redis_keys.models_plan_snapshots())
    return {plan.decode(): json.loads(value) for plan, value in raw.items()}
