"""The drill's Django-side steps, each run in its own process by the orchestrator (which never
sets Django up itself):

    python -m drill.seed prepare      → {"database_url": ...}
    DATABASE_URL=... python -m drill.seed populate --accounts 4 --cap 8
                                      → {"client_key": ..., "admin_api_key": ..., ...}

``prepare`` creates the database ``cpr_drill`` next to the project's (embedded or given) one. The
drill's Redis is a server of its own (``drill.system.DrillRedis``), which it flushes and kills.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta

DRILL_DATABASE = "cpr_drill"
# Known values of every kind of secret the system holds, so the scan can look for them.
ACCESS_TOKEN = "drill-access-token-{index}-Zq8Lr"
REFRESH_TOKEN = "drill-refresh-token-{index}-Kp3Vx"


def _setup() -> None:
    import django

    from config.bootstrap import prepare as bootstrap

    bootstrap()
    django.setup()


def prepare() -> dict:
    _setup()
    from django.conf import settings

    from config.embedded import create_database_if_missing, database_url_for

    server = settings.DATABASES["default"]
    create_database_if_missing(server, DRILL_DATABASE)
    return {"database_url": database_url_for(server, DRILL_DATABASE)}


PROXY_TABLES = (
    "usage_records, ops_error_logs, request_time_buckets, account_usage, account_cookies,"
    " accounts, client_api_keys"
)
BOT_TABLES = (
    "processed_updates, update_inbox, album_items, messages, topics, users, broadcasts,"
    " delete_confirmations, bots, admin_users"
)


def populate(*, accounts: int, cap: int, bot_id: int, admin_password: str) -> dict:
    _setup()
    from django.db import connection
    from django.utils import timezone

    from bots.services.bots import bot_upsert
    from bots.services.settings import verification_setting_change
    from proxy.models import Account, RuntimeSettings
    from proxy.services.admin_api_key import admin_api_key_regenerate
    from proxy.services.admin_users import admin_user_create_default
    from proxy.services.client_api_keys import client_api_key_create
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(f"truncate {PROXY_TABLES}, {BOT_TABLES} cascade")  # noqa: S608 - constants
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    # The cap is real (the drill checks it holds after a Redis flush); no pacing between
    # requests, so the load is the machine's, not the limiter's.
    RuntimeSettings.objects.update(
        max_concurrent_per_account=cap, request_interval_ms=0, rotation_strategy="smart"
    )
    for index in range(accounts):
        Account.objects.create(
            id=f"acct_drill_{index}",
            access_token=ACCESS_TOKEN.format(index=index),
            refresh_token=REFRESH_TOKEN.format(index=index),
            access_token_expires_at=now + timedelta(days=30),
            chatgpt_account_id=f"org-drill-{index}",
            status="active",
            added_at=now,
            updated_at=now,
        )
    client_key = client_api_key_create(name="drill", now=now).key
    admin_user_create_default(password=admin_password, now=now)
    bot_upsert(bot_id=bot_id, username="hodor_drill_bot", display_name="Hodor", now=now)
    # The storm relays messages; the verification flow has its own tests.
    verification_setting_change(bot_id=bot_id, key="verify_enabled", value="0")
    return {
        "client_key": client_key,
        "admin_api_key": admin_api_key_regenerate(now=now),
        "access_tokens": [ACCESS_TOKEN.format(index=index) for index in range(accounts)],
        "refresh_tokens": [REFRESH_TOKEN.format(index=index) for index in range(accounts)],
    }


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=["prepare", "populate"])
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--bot-id", type=int, default=0)
    arguments = parser.parse_args()
    if arguments.step == "prepare":
        result = prepare()
    else:
        result = populate(
            accounts=arguments.accounts,
            cap=arguments.cap,
            bot_id=arguments.bot_id,
            admin_password=os.environ["CPR_ADMIN_DEFAULT_PASSWORD"],
        )
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
