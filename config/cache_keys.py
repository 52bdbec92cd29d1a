"""Cache key layout: ``<REDIS_KEY_PREFIX>cache:<version>:<key>`` (e.g. ``cpr:cache:1:...``)."""


def make_cache_key(key: str, key_prefix: str, version: int) -> str:
    return f"{key_prefix}cache:{version}:{key}"
