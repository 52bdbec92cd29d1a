"""Prepare the project target of the benchmark (called by bench.run in the project's venv).

python -m bench.seed prepare             → {"database_url": ...} (creates database cpr_bench)
DATABASE_URL=... python -m bench.seed populate --accounts 4   → {"key": "sk_..."}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta

BENCH_DATABASE = "cpr_bench"


def prepare() -> dict:
    import django

    from config.bootstrap import prepare

    prepare()
    django.setup()
    from django.conf import settings

    from config.embedded import create_database_if_missing, database_url_for

    server = settings.DATABASES["default"]
    create_database_if_missing(server, BENCH_DATABASE)
    return {
        "database_url": database_url_for(server, BENCH_DATABASE),
        "redis_url": settings.REDIS_URL,
    }


def populate(accounts: int, *, key_policy: bool = False) -> dict:
    import django

    from config.bootstrap import prepare

    prepare()
    django.setup()
    from django.db import connection
    from django.utils import timezone

    from proxy.models import Account, ClientApiKey, RuntimeSettings
    from proxy.services.client_api_keys import client_api_key_create
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "truncate usage_records, ops_error_logs, request_time_buckets, account_usage,"
            " account_cookies, accounts, client_api_keys cascade"
        )
    # Every run starts from the same runtime state: no affinity records, slots or cursor left
    # by an earlier run (the account ids repeat, so old records would still steer scheduling).
    # Only the bench's own prefix is touched (bench.run sets REDIS_KEY_PREFIX=cprbench:).
    from django.conf import settings
    from django_redis import get_redis_connection

    if settings.REDIS_KEY_PREFIX.startswith("cprbench"):
        client = get_redis_connection("default")
        stale = list(client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}*", count=1000))
        for start in range(0, len(stale), 1000):
            client.delete(*stale[start : start + 1000])
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    # The benchmark measures the request path, not our own limits: no cap, no pacing.
    RuntimeSettings.objects.update(
        max_concurrent_per_account=100_000, request_interval_ms=0, rotation_strategy="smart"
    )
    for index in range(accounts):
        Account.objects.create(
            id=f"acct_bench_{index}",
            access_token=f"bench-token-{index}",
            access_token_expires_at=now + timedelta(days=30),
            chatgpt_account_id=f"org-bench-{index}",
            status="active",
            added_at=now,
            updated_at=now,
        )
    key = client_api_key_create(name="bench", now=now)
    assert ClientApiKey.objects.count() == 1
    if key_policy:
        # Every check of a policy runs (issue 25), none refuses: limits far above the load.
        from decimal import Decimal

        from proxy.services.key_policies import PolicyValues, key_policy_set

        key_policy_set(
            key=key,
            values=PolicyValues(
                requests_per_minute=10**9,
                tokens_per_minute=10**9,
                max_concurrent_requests=10**6,
                daily_budget_usd=Decimal("99999999"),
                monthly_budget_usd=Decimal("99999999"),
                allowed_models=["gpt-5.4"],
            ),
            now=now,
        )
    return {"key": key.key}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=["prepare", "populate"])
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--key-policy", action="store_true")
    arguments = parser.parse_args()
    result = (
        prepare()
        if arguments.step == "prepare"
        else populate(arguments.accounts, key_policy=arguments.key_policy)
    )
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
