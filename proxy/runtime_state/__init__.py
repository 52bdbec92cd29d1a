"""Runtime state kept in Redis (seed 004 §4B): sessions, leases, affinity, model snapshots.

Everything here is disposable: after a FLUSHALL admins log in again, leases are re-contested,
affinity falls back to normal scheduling and the model list is fetched again.
"""

from django_redis import get_redis_connection
from redis import Redis


def redis_client() -> Redis:
    """The shared synchronous client (django-redis's pool on REDIS_URL)."""
    return get_redis_connection("default")
