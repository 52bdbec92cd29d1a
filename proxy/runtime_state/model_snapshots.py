"""Plan → model list cache (seed 004 §4B.4): one HASH, always replaced as a whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import redis

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


Snapshots = dict[str, dict[str, Any]]


def model_snapshots_update(change: Callable[[Snapshots], Snapshots]) -> Snapshots:
    """Replace the hash with ``change(current)``, atomically against every other writer.

    A read-modify-write over two round trips would lose a concurrent writer's plan (a model
    refresh and an operator's per-account models list at once): the hash is WATCHed while it
    is read, the replacement (DEL + HSET, as ``model_snapshots_replace``) runs in MULTI, and
    a write that met another one starts again from what that one wrote. ``change`` must not
    call out (it may run more than once). Returns what was written.
    """
    key = redis_keys.models_plan_snapshots()
    with redis_client().pipeline(transaction=True) as pipeline:
        while True:
            try:
                pipeline.watch(key)
                raw = cast(dict[bytes, bytes], pipeline.hgetall(key))  # not decoded: bytes
                current = {plan.decode(): json.loads(value) for plan, value in raw.items()}
                wanted = change(current)
                pipeline.multi()
                pipeline.delete(key)
                if wanted:
                    pipeline.hset(
                        key,
                        mapping={plan: json.dumps(snapshot) for plan, snapshot in wanted.items()},
                    )
                pipeline.execute()
                return wanted
            except redis.WatchError:
                continue


def model_snapshots_get_all() -> dict[str, dict[str, Any]]:
    """Every plan's snapshot; empty when never fetched (or after a FLUSHALL)."""
    raw = cast(dict[bytes, bytes], redis_client().hgetall(redis_keys.models_plan_snapshots()))
    return {plan.decode(): json.loads(value) for plan, value in raw.items()}
