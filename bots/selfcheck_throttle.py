"""A cheap throttle in front of ``GET /telegram/selfcheck``: each check calls Telegram's
getWebhookInfo, and the page needs no authentication (spec §1.5), so without a cap anyone could
make the bot flood Telegram (and get its token rate-limited).

At most SELFCHECK_LIVE_CHECKS_PER_SECOND checks per wall-clock second across every worker: one
Lua script increments ``<prefix>telegram:selfcheck:<epoch second>`` (EXPIRE 2 s when created).
After a FLUSHALL the current second simply starts counting again.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django_redis import get_redis_connection

from common.redis_scripts import lua_script

SELFCHECK_LIVE_CHECKS_PER_SECOND = 3

_COUNT = lua_script("bots", "selfcheck_count")


def selfcheck_key(now: datetime) -> str:
    return f"{settings.REDIS_KEY_PREFIX}telegram:selfcheck:{int(now.timestamp())}"


def selfcheck_slot_take(*, now: datetime) -> bool:
    """Count one self-check in the second of ``now``; return whether it may run."""
    script = get_redis_connection("default").register_script(_COUNT)
    count = int(script(keys=[selfcheck_key(now)], args=[2]))
    return count <= SELFCHECK_LIVE_CHECKS_PER_SECOND
