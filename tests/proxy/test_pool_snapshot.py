"""The pool snapshot's version (proxy/pool_snapshot.py, migration proxy/0005): every writer of
the tables the snapshot is read from moves it in its own transaction, so the next request's key
statement sees that the snapshot in memory is old; nothing else moves it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from proxy import pool_snapshot
from proxy.clients.oauth import TokenSet
from proxy.loop_resources import close_current_loop_resources
from proxy.models import Account, AccountUsage, RuntimeSettings
from proxy.quota import QuotaSnapshot
from proxy.services import account_state
from proxy.services.account_cookies import account_cookies_store
from proxy.services.account_quota import account_quota_apply
from proxy.services.account_usage import AccountUsageIncrement, account_usage_add_many
from proxy.services.accounts import account_delete, account_update_by_admin
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.retention import account_cookies_delete_expired
from proxy.services.runtime_settings import runtime_settings_ensure, runtime_settings_update
from proxy.services.token_refresh import token_refresh_store
from tests.proxy.factories import make_account, make_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def version() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"select {pool_snapshot.POOL_VERSION_SQL}")
        return int(cursor.fetchone()[0])


def moved_by(write) -> int:
    """How much ``write`` (a callable) moved the version."""
    before = version()
    write()
    return version() - before


# ----------------------------------------------------------------------------- the triggers

TABLE_WRITES = {
    "accounts insert": lambda account: make_account(),
    "accounts update": lambda account: Account.objects.filter(pk=account.pk).update(label="x"),
    "accounts delete": lambda account: Account.objects.filter(pk=account.pk).delete(),
    "accounts truncate": lambda account: _sql("truncate accounts cascade"),
    "account_usage upsert": lambda account: AccountUsage.objects.update_or_create(
        account=account, defaults={"request_count": 7}
    ),
    "account_cookies insert": lambda account: make_cookie(account=account),
    "account_cookies truncate": lambda account: _sql("truncate account_cookies"),
    "runtime_settings update": lambda account: RuntimeSettings.objects.update(
        request_interval_ms=123
    ),
    "fingerprints update": lambda account: _sql(
        "update fingerprints set app_version = app_version || '.1'"
    ),
}


def _sql(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


@pytest.fixture
def pool_rows():
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    return make_account()


@pytest.mark.parametrize("write", TABLE_WRITES.values(), ids=TABLE_WRITES.keys())
def test_each_kind_of_write_to_a_pool_table_moves_the_version_by_one(pool_rows, write):
    assert moved_by(lambda: write(pool_rows)) == 1


def test_a_write_that_changes_nothing_and_a_rolled_back_one_leave_it(pool_rows):
    same_label = pool_rows.label

    def rolled_back() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            Account.objects.filter(pk=pool_rows.pk).update(label="changed")
            raise RuntimeError("rollback")

    assert moved_by(lambda: Account.objects.filter(pk=pool_rows.pk).update(label=same_label)) == 0
    assert moved_by(rolled_back) == 0
    assert moved_by(lambda: Account.objects.filter(pk="nobody").update(label="x")) == 0


def test_one_transaction_moves_it_once_however_many_rows_it_writes(pool_rows):
    def many() -> None:
        with transaction.atomic():
            for _ in range(5):
                make_account()
            Account.objects.update(label="all")
            RuntimeSettings.objects.update(request_interval_ms=1)

    assert moved_by(many) == 1


def test_a_write_to_a_table_outside_the_snapshot_leaves_it(pool_rows):
    from proxy.services.client_api_keys import client_api_key_create

    assert moved_by(lambda: client_api_key_create(name="k", now=timezone.now())) == 0


# ----------------------------------------------------------------------------- every writer


def _run(coroutine):
    async def run_and_close():
        try:
            return await coroutine
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())


def _quota(limit_reached: bool) -> QuotaSnapshot:
    now = timezone.now()
    return QuotaSnapshot(
        quota={"primary": {"used_percent": 100 if limit_reached else 5}},
        limit_reached=limit_reached,
        reset_at=now + timedelta(hours=1),
        plan_type="plus",
        window_seconds=18000,
        window_reset_at=now + timedelta(hours=1),
    )


WRITERS = {
    "console/admin API: label and status": lambda a: account_update_by_admin(
        account=a, label="new label", status="disabled", now=timezone.now()
    ),
    "console/admin API: delete": lambda a: account_delete(account=a),
    "settings": lambda a: runtime_settings_update(
        changes={"max_concurrent_per_account": 9}, now=timezone.now()
    ),
    "ledger: usage counters": lambda a: account_usage_add_many(
        increments=[(a.id, AccountUsageIncrement(counted_request=True, input_tokens=5))],
        now=timezone.now(),
    ),
    "request path: upstream cookies": lambda a: _run(
        account_cookies_store(
            account_id=a.id,
            cookies=[
                {
                    "domain": "chatgpt.com",
                    "name": "cf_clearance",
                    "value": "v",
                    "path": "/",
                    "expires_at": None,
                }
            ],
            now=timezone.now(),
        )
    ),
    "retention: expired cookies": lambda a: account_cookies_delete_expired(now=timezone.now()),
    "request path: banned": lambda a: _run(
        account_state.account_mark_banned(a.id, token=a.access_token, now=timezone.now())
    ),
    "request path: expired": lambda a: _run(
        account_state.account_mark_expired(
            a.id, token=a.access_token, now=timezone.now(), schedule_refresh=False
        )
    ),
    "request path: rate limited": lambda a: _run(
        account_state.account_mark_rate_limited(a.id, now=timezone.now(), retry_after_seconds=5)
    ),
    "request path: Cloudflare challenge": lambda a: _run(
        account_state.account_register_cloudflare_challenge(a.id, now=timezone.now())
    ),
    "quota refresh: snapshot applied": lambda a: _run(
        account_quota_apply(a.id, _quota(limit_reached=True), now=timezone.now())
    ),
    "request path: quota exhausted": lambda a: _run(
        account_state.account_mark_quota_exhausted(a.id, now=timezone.now())
    ),
    "token refresh: new tokens stored": lambda a: token_refresh_store(
        account_id=a.id,
        spent_refresh_token=a.refresh_token,
        tokens=TokenSet(access_token="fresh-access", refresh_token="fresh-refresh", id_token=None),
        now=timezone.now(),
    ),
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_every_writer_of_the_pool_moves_the_version(pool_rows, writer):
    account = make_account(
        access_token_expires_at=timezone.now() + timedelta(days=1), refresh_token="rt-old"
    )
    make_cookie(account=account, expires_at=timezone.now() - timedelta(days=1))  # to trim
    before = version()

    writer(account)

    assert version() > before


def test_the_time_transitions_of_the_request_path_move_it(pool_rows):
    """A passed usage window rolled and a lifted quota limit (spec §3.2) are writes too."""
    now = timezone.now()
    account = make_account(
        access_token_expires_at=now + timedelta(days=1),
        quota_limit_reached=True,
        quota_cooldown_until=now - timedelta(seconds=1),
        status="quota_exhausted",
    )
    views = _run(pool_snapshot.pool_snapshot(version())).candidates(None)
    [view] = [view for view in views if view.id == account.id]
    before = version()

    eligible = _run(account_state.accounts_apply_time_transitions([view], now=now))

    assert [candidate.id for candidate in eligible] == [account.id]
    assert version() > before


# ----------------------------------------------------------------------------- the cache


def test_the_snapshot_in_memory_serves_until_the_version_moves(pool_rows):
    pool_snapshot.forget_pool_snapshot()
    first = _run(pool_snapshot.pool_snapshot(version()))
    again = _run(pool_snapshot.pool_snapshot(version()))
    Account.objects.filter(pk=pool_rows.pk).update(status="disabled")
    after_the_write = _run(pool_snapshot.pool_snapshot(version()))

    assert again is first
    assert pool_rows.id in [account.id for account in first.accounts]
    assert after_the_write.version > first.version
    assert pool_rows.id not in [account.id for account in after_the_write.accounts]


def test_requests_get_copies_they_may_change(pool_rows):
    pool_snapshot.forget_pool_snapshot()
    snapshot = _run(pool_snapshot.pool_snapshot(version()))
    [mine] = [account for account in snapshot.candidates(None) if account.id == pool_rows.id]

    mine.status = "expired"

    [kept] = [account for account in snapshot.accounts if account.id == pool_rows.id]
    assert kept.status == "active"


def test_an_account_group_is_the_labels_word(pool_rows):
    make_account(id="acct_team", label="Alice's Pro, group:team-a")
    make_account(id="acct_other", label="group:team-ab\tgroup:b")
    pool_snapshot.forget_pool_snapshot()
    snapshot = _run(pool_snapshot.pool_snapshot(version()))

    assert [account.id for account in snapshot.candidates("team-a")] == ["acct_team"]
    assert [account.id for account in snapshot.candidates("b")] == ["acct_other"]
    assert snapshot.candidates("nobody") == []


def _snapshot_at(version: int) -> pool_snapshot.PoolSnapshot:
    from proxy.domain.slots import SchedulerSettings

    return pool_snapshot.PoolSnapshot(
        version=version,
        aliases={},
        scheduler_settings=SchedulerSettings("smart", 3, 50),
        fingerprint=None,
        accounts=(),
        label_words=(),
    )


def test_requests_that_find_the_snapshot_old_share_one_reading(monkeypatch):
    """A burst of requests after a write: one reading for all of them (under load, one reading
    per request queued one behind the other made requests late by seconds)."""
    readings = []

    async def read(self):
        readings.append(1)
        await asyncio.sleep(0.05)
        return _snapshot_at(10)

    monkeypatch.setattr(pool_snapshot._Reader, "read", read)
    pool_snapshot.forget_pool_snapshot()

    async def burst():
        return await asyncio.gather(*(pool_snapshot.pool_snapshot(10) for _ in range(50)))

    snapshots = asyncio.run(burst())

    assert len(readings) == 1
    assert {snapshot.version for snapshot in snapshots} == {10}


def test_a_request_that_saw_a_newer_version_than_the_reading_in_flight_waits_for_one_more(
    monkeypatch,
):
    versions = iter([5, 9])
    readings = []

    async def read(self):
        readings.append(1)
        await asyncio.sleep(0.05)
        return _snapshot_at(next(versions))

    monkeypatch.setattr(pool_snapshot._Reader, "read", read)
    pool_snapshot.forget_pool_snapshot()

    async def overlapping():
        early = asyncio.ensure_future(pool_snapshot.pool_snapshot(5))
        await asyncio.sleep(0.01)  # the first reading is in flight
        late = await pool_snapshot.pool_snapshot(9)
        return (await early).version, late.version

    assert asyncio.run(overlapping()) == (5, 9)
    assert len(readings) == 2


def test_a_reading_does_not_queue_behind_the_requests_for_the_pools_connections(pool_rows):
    """Under load every request's key lookup queues for the pool's connections; the reading
    that they may all be waiting for has a connection of its own."""
    from proxy.loop_resources import database_pool

    pool_snapshot.forget_pool_snapshot()
    current = version()

    async def with_the_pool_taken() -> int:
        pool = await database_pool.get()
        released = asyncio.Event()
        holding = []

        async def hold() -> None:
            async with pool.connection():
                holding.append(1)
                await released.wait()

        holders = [asyncio.ensure_future(hold()) for _ in range(pool.max_size)]
        while len(holding) < pool.max_size:
            await asyncio.sleep(0.01)
        try:
            snapshot = await pool_snapshot.pool_snapshot(current)
        finally:
            released.set()
            await asyncio.gather(*holders)
        return snapshot.version

    assert _run(with_the_pool_taken()) == current
