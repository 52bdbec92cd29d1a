"""An account's daily burn cap (issue 25 item 5): today's burn counts from 00:00 UTC (the
baseline the roll gives each policy), the pool snapshot holds an account over its cap back until
the next UTC day (and is read again after every write of a policy), so /v1 skips it until then;
the policy goes with its account."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from config.schedule import BEAT_SCHEDULE
from proxy import pool_snapshot
from proxy.daily_burn import DailyBurn, daily_burns
from proxy.domain.key_policy import next_day_start
from proxy.loop_resources import close_current_loop_resources
from proxy.models import Account, AccountPolicy
from proxy.services.account_policies import account_burn_days_roll, account_policy_set
from proxy.services.account_usage import AccountUsageIncrement, account_usage_add
from proxy.services.accounts import account_delete
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.tasks import roll_account_burn_days_task
from telemetry.services.ledger import usage_record_create
from tests.proxy.conftest import make_pool_account, post_responses
from tests.proxy.factories import make_account

NOW = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)
NEXT_DAY = datetime(2026, 12, 1, 0, 0, 30, tzinfo=UTC)
BODY = {"model": "gpt-5.4", "input": "hi", "stream": False}


def _burn(account: Account, *, at: datetime, tokens: int) -> None:
    """A request the account served at ``at``, recorded as the ledger does: its usage row and
    bucket, and its account counters."""
    usage_record_create(
        created_at=at,
        account_id=account.pk,
        model="gpt-5.4",
        message="v1 responses completed",
        input_tokens=tokens - tokens // 4,
        output_tokens=tokens // 4,
        cached_tokens=0,
        metadata={},
    )
    account_usage_add(
        account_id=account.pk,
        increment=AccountUsageIncrement(
            counted_request=True, input_tokens=tokens - tokens // 4, output_tokens=tokens // 4
        ),
        now=at,
    )


@pytest.mark.django_db
def test_the_burn_counts_from_utc_midnight_and_the_roll_starts_each_day_afresh():
    account = make_account(now=NOW - timedelta(days=3))
    _burn(account, at=NOW - timedelta(days=1), tokens=4000)
    _burn(account, at=NOW - timedelta(hours=1), tokens=1500)

    policy = account_policy_set(account=account, daily_burn_cap_tokens=2000, now=NOW)
    under = daily_burns([account.pk], now=NOW)[account.pk]
    _burn(account, at=NOW, tokens=600)
    over = daily_burns([account.pk], now=NOW)[account.pk]
    rolled_again_today = account_burn_days_roll(now=NOW)
    before_the_roll = daily_burns([account.pk], now=NEXT_DAY)[account.pk]
    rolled_next_day = account_burn_days_roll(now=NEXT_DAY)
    next_day = daily_burns([account.pk], now=NEXT_DAY)[account.pk]

    # The counters stood at 4,000 at midnight: today is what came after.
    assert (policy.burn_day, policy.burn_baseline_tokens) == (NOW.date(), 4000)
    assert under == DailyBurn(cap_tokens=2000, burned_tokens=1500, over_cap=False, resumes_at=None)
    assert over == DailyBurn(
        cap_tokens=2000, burned_tokens=2100, over_cap=True, resumes_at=NEXT_DAY.replace(second=0)
    )
    assert rolled_again_today == 0
    # A new day whose baseline is not rolled yet applies no cap; its burn comes from buckets.
    assert before_the_roll == DailyBurn(2000, 0, False, None)
    assert rolled_next_day == 1
    assert AccountPolicy.objects.get(pk=account.pk).burn_baseline_tokens == 6100
    assert next_day == DailyBurn(2000, 0, False, None)


@pytest.mark.django_db
def test_an_uncapped_accounts_burn_comes_from_todays_buckets():
    account = make_account(now=NOW - timedelta(days=3))
    _burn(account, at=NOW - timedelta(days=1), tokens=4000)
    _burn(account, at=NOW - timedelta(minutes=5), tokens=800)

    assert daily_burns([account.pk], now=NOW) == {account.pk: DailyBurn(None, 800, False, None)}


@pytest.mark.django_db
def test_the_policy_goes_with_its_account_and_null_removes_it():
    kept, deleted = make_account(), make_account()
    for account in (kept, deleted):
        account_policy_set(account=account, daily_burn_cap_tokens=10, now=NOW)

    account_delete(account=deleted)
    removed = account_policy_set(account=kept, daily_burn_cap_tokens=None, now=NOW)

    assert removed is None
    assert AccountPolicy.objects.count() == 0


@pytest.mark.django_db
def test_the_roll_runs_every_minute_from_the_beat_schedule():
    account = make_account()
    AccountPolicy.objects.create(account=account, daily_burn_cap_tokens=5, updated_at=NOW)

    assert BEAT_SCHEDULE["proxy-roll-account-burn-days"] == {
        "task": "proxy.roll_account_burn_days",
        "schedule": 60.0,
    }
    assert roll_account_burn_days_task() == 1
    assert roll_account_burn_days_task() == 0
    assert AccountPolicy.objects.get(pk=account.pk).burn_day == timezone.now().date()


def _pool_version() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"select {pool_snapshot.POOL_VERSION_SQL}")
        return int(cursor.fetchone()[0])


def _snapshot() -> pool_snapshot.PoolSnapshot:
    version = _pool_version()

    async def read():
        try:
            return await pool_snapshot.pool_snapshot(version)
        finally:
            await close_current_loop_resources()

    return asyncio.run(read())


@pytest.mark.django_db(transaction=True)
def test_every_write_of_a_policy_moves_the_pool_snapshots_version():
    account = make_account()
    moved = []
    for write in (
        lambda: account_policy_set(account=account, daily_burn_cap_tokens=10, now=NOW),
        lambda: account_burn_days_roll(now=NOW),  # rolled already: no write
        lambda: account_burn_days_roll(now=NEXT_DAY),
        lambda: account_policy_set(account=account, daily_burn_cap_tokens=None, now=NEXT_DAY),
    ):
        before = _pool_version()
        write()
        moved.append(_pool_version() - before)

    assert moved == [1, 0, 1, 1]


@pytest.mark.django_db(transaction=True)
def test_the_snapshot_holds_a_capped_account_back_until_the_next_utc_day():
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    now = timezone.now()
    valid = {"access_token_expires_at": now + timedelta(days=3)}
    capped = make_account(id="acct_1_capped", added_at=now - timedelta(minutes=2), **valid)
    free = make_account(id="acct_2_free", added_at=now - timedelta(minutes=1), **valid)
    _burn(capped, at=now, tokens=100)
    account_policy_set(account=capped, daily_burn_cap_tokens=100, now=now)
    pool_snapshot.forget_pool_snapshot()

    snapshot = _snapshot()
    midnight = next_day_start(now)

    assert snapshot.burn_capped_until == {capped.pk: midnight}
    assert [account.id for account in snapshot.candidates(None, now=now)] == [free.pk]
    assert [account.id for account in snapshot.candidates(None, now=midnight)] == [
        capped.pk,
        free.pk,
    ]


def test_an_account_over_its_cap_is_skipped_and_comes_back_the_next_utc_day(
    proxy, upstream, client_key, monkeypatch
):
    now = timezone.now()
    valid = {"access_token_expires_at": now + timedelta(days=3)}
    capped = make_pool_account("tok-capped", **valid)
    spare = make_pool_account("tok-spare", **valid)
    _burn(capped, at=now, tokens=3000)
    account_policy_set(account=capped, daily_burn_cap_tokens=3000, now=now)

    served_today = [post_responses(proxy, client_key, BODY).status_code for _ in range(4)]
    proxy.drain()
    Account.objects.filter(pk=spare.pk).update(status="disabled")
    only_capped_left = post_responses(proxy, client_key, BODY)
    called_today = upstream.tokens_called()
    # The next UTC day, before the roll has run: the cap applies no more.
    tomorrow = next_day_start(now) + timedelta(seconds=30)
    monkeypatch.setattr(timezone, "now", lambda: tomorrow)
    next_day = post_responses(proxy, client_key, BODY)
    proxy.drain()

    assert served_today == [200] * 4
    assert called_today == ["tok-spare"] * 4
    assert only_capped_left.status_code == 503
    assert only_capped_left.json()["error"]["code"] == "no_available_accounts"
    assert next_day.status_code == 200
    assert upstream.tokens_called()[4:] == ["tok-capped"]
