"""The model catalog as the request path sees it: the Redis plan snapshots, cached briefly.

Reading the snapshots costs one Redis round trip, so each process keeps the catalog for
``CACHE_SECONDS``; a model it does not know triggers an immediate re-read (a refresh may just
have added it), so only unknown names pay the round trip. When Redis is unreachable or holds
no snapshots the built-in list is used.
"""

from __future__ import annotations

import json
import logging
from typing import cast

from common import clock
from proxy import redis_keys
from proxy.loop_resources import async_redis
from proxy.models_catalog import Catalog, builtin_catalog, catalog_from_snapshots

logger = logging.getLogger(__name__)
CACHE_SECONDS = 30.0

_cached: Catalog | None = None
_loaded_at = 0.0


async def current_catalog(*, refresh: bool = False) -> Catalog:
    global _cached, _loaded_at
    if not refresh and _cached is not None and clock.monotonic() - _loaded_at < CACHE_SECONDS:
        return _cached
    try:
        redis = await async_redis.get()
        raw = cast(
            dict[bytes, bytes], await redis.hgetall(redis_keys.models_plan_snapshots())
        )  # not decoded: bytes
        snapshots = {plan.decode(): json.loads(value) for plan, value in raw.items()}
        catalog = catalog_from_snapshots(snapshots)
    except Exception:
        logger.warning("model snapshots unreadable; serving the built-in catalog", exc_info=True)
        catalog = Catalog(builtin_catalog())
    _cached, _loaded_at = catalog, clock.monotonic()
    return catalog


async def recognised_catalog(model: str, aliases: dict[str, str]) -> Catalog | None:
    """The catalog when ``model`` is an alias or a catalog id, else None (→ 404)."""
    catalog = await current_catalog()
    if model in aliases or model in catalog.ids:
        return catalog
    catalog = await current_catalog(refresh=True)
    return catalog if model in catalog.ids else None


def forget_cached_catalog() -> None:
    global _cached
    _cached = None
