"""Every key the project writes carries REDIS_KEY_PREFIX: cache entries and Celery's broker keys."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache

from config import celery_app


def test_cache_keys_carry_the_prefix(redis_client):
    cache.set("greeting", "hello", 30)

    assert redis_client.exists(f"{settings.REDIS_KEY_PREFIX}cache:1:greeting") == 1
    assert cache.get("greeting") == "hello"


def test_celery_broker_keys_carry_the_prefix(redis_client):
    queue = "prefix-check"
    celery_prefix = f"{settings.REDIS_KEY_PREFIX}celery:"

    celery_app.send_task("tests.never_consumed", queue=queue)

    try:
        assert redis_client.llen(f"{celery_prefix}{queue}") == 1
        assert redis_client.exists(f"{celery_prefix}_kombu.binding.{queue}") == 1
        assert redis_client.exists(queue) == 0
        assert redis_client.exists(f"_kombu.binding.{queue}") == 0
    finally:
        redis_client.delete(f"{celery_prefix}{queue}", f"{celery_prefix}_kombu.binding.{queue}")
