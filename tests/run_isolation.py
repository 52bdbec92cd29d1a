"""Pytest plugin (loaded with ``-p`` before Django is set up) isolating a test run.

* Every Redis key of this run carries a random prefix, and the keys are removed at the end
  (never FLUSHDB: the Redis may be shared).
* CPR_DATA_DIR points at a fresh temporary folder, so per-installation secrets of the real
  data folder are never touched.
* ``config.bootstrap.prepare()`` runs before Django is set up (the embedded stores).
* The test database is named after the run (``test_cpr_<run id>``), created fresh by
  pytest-django and dropped at the end.

Under pytest-xdist the controller imports this first: it starts the embedded stores, and the
workers it spawns inherit their published addresses (nothing starts twice) and its
TEST_DATABASE_NAME, which pytest-django suffixes per worker (``_gw0``, ``_gw1``...); each
worker draws its own run id, so its own Redis prefix and data folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

RUN_ID = uuid.uuid4().hex[:12]
RUN_PREFIX = f"cprtest:{RUN_ID}:"
RUN_DATA_DIR = tempfile.mkdtemp(prefix="cpr-test-data-")

os.environ["REDIS_KEY_PREFIX"] = RUN_PREFIX
os.environ["CPR_DATA_DIR"] = RUN_DATA_DIR
# A database of this run only (pytest-django creates it and drops it at the end), so that
# several test runs can share one PostgreSQL server.
os.environ.setdefault("TEST_DATABASE_NAME", f"test_cpr_{RUN_ID}")

# The test session is an entry point like manage.py: var/ and the embedded stores are made
# ready here, before pytest-django sets Django up (the settings only read the environment).
from config.bootstrap import prepare  # noqa: E402

prepare()


def delete_keys_with_prefix(redis_url: str, prefix: str) -> int:
    """Remove every key starting with ``prefix``; return how many were removed."""
    import redis

    client = redis.Redis.from_url(redis_url)
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            removed += client.unlink(*batch)
            batch.clear()
    if batch:
        removed += client.unlink(*batch)
    client.close()
    return removed


def drop_test_database_if_left(database: dict) -> None:
    """pytest-django drops the run's database, but not while pooled connections of other
    threads (the live server, ledger threads) still hold it: drop it then, forcibly."""
    import psycopg

    name = database.get("TEST", {}).get("NAME")
    if not name or not name.startswith("test_"):
        return
    with psycopg.connect(
        host=database["HOST"] or None,
        port=database["PORT"] or None,
        user=database["USER"],
        password=database["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')


def pytest_sessionfinish(session, exitstatus) -> None:
    from django.conf import settings

    delete_keys_with_prefix(settings.REDIS_URL, RUN_PREFIX)
    drop_test_database_if_left(settings.DATABASES["default"])
    shutil.rmtree(RUN_DATA_DIR, ignore_errors=True)
