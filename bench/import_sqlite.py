"""How long ``manage.py import_sqlite`` takes on a large generated v3 source (never a test).

    python -m bench.import_sqlite [--usage-rows 250000]

Builds an original-style SQLite v3 database under var/bench/import/ (the schema of
tests/proxy/fixtures/sqlite_v3: 20 accounts; usage_records 85 % successes with a realistic
metadata object, 10 % level 'error', 5 % noise; v3 ops_error_logs 2 % of that; a 90-day
bucket history), migrates a fresh database ``cpr_bench_import`` on the embedded (or
DATABASE_URL's) PostgreSQL, runs the real command in a subprocess and prints one line:
rows, seconds, rows per second.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "cpr_bench_import"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def generate(path: Path, usage_rows: int) -> dict[str, int]:
    """Write the source; return its row counts."""
    sys.path.insert(0, str(ROOT))
    from tests.proxy.sqlite_v3 import build_source, insert

    path.unlink(missing_ok=True)
    database = build_source(path)
    now = datetime.now(UTC)
    random.seed(21)
    accounts = [f"acc_{index:02d}" for index in range(20)]
    for account in accounts:
        insert(
            database, "accounts", id=account, access_token=f"at-{account}", status="active",
            chatgpt_account_id=f"org-{account}", added_at=_iso(now), updated_at=_iso(now),
        )  # fmt: skip
    models = ["gpt-5.4", "gpt-5.4-mini", "gpt-5.3-codex"]

    def usage_row(index: int) -> tuple:
        created = now - timedelta(seconds=random.randrange(30 * 86400))
        roll = index % 20
        level, status, account = "info", 200, random.choice(accounts)
        if roll < 2:
            level, status = "error", random.choice([429, 500, 502])
        elif roll == 2:
            account = None  # noise
        usage = {
            "inputTokens": random.randrange(20000), "outputTokens": random.randrange(2000),
            "cachedTokens": random.randrange(10000), "reasoningTokens": random.randrange(500),
        }  # fmt: skip
        metadata = {
            "usage": usage, "requestedModel": "fast", "upstreamModel": random.choice(models),
            "serviceTier": "default", "firstTokenMs": random.randrange(2000),
            "route": "/v1/responses", "apiKind": "responses", "clientIp": "203.0.113.7",
            "userAgent": "codex_cli_rs/0.40.0", "reasoningEffort": "medium",
        }  # fmt: skip
        return (
            f"usage_{index:09d}", f"req_{index}", "v1.response", level, account, "/v1/responses",
            random.choice(models), status, "http", 0, None, None, f"resp_{index}", None,
            random.randrange(30000), "POST /v1/responses", json.dumps(metadata), _iso(created),
        )  # fmt: skip

    database.executemany(
        "insert into usage_records (id, request_id, kind, level, account_id, route, model,"
        " status_code, transport, attempt_index, upstream_status_code, failure_class,"
        " response_id, upstream_request_id, latency_ms, message, metadata_json, created_at)"
        " values (" + ", ".join("?" * 18) + ")",
        (usage_row(index) for index in range(usage_rows)),
    )
    ops_rows = usage_rows // 50
    database.executemany(
        "insert into ops_error_logs (id, kind, account_id, model, status_code, message,"
        " metadata_json, created_at) values (?, 'v1.response', ?, 'gpt-5.4', 503, 'upstream 503',"
        ' \'{"body": "busy"}\', ?)',
        (
            (f"ops_{index:09d}", random.choice(accounts), _iso(now - timedelta(minutes=index)))
            for index in range(ops_rows)
        ),
    )
    slot = int(now.timestamp()) // 900 * 900
    buckets = [
        (_iso(datetime.fromtimestamp(slot - step * 900, tz=UTC)), account, model)
        for step in range(0, 90 * 96, 4)
        for account in accounts[:5]
        for model in models
    ]
    database.executemany(
        "insert into usage_time_buckets (bucket_start, account_id, model, service_tier,"
        " request_count, error_count, input_tokens, latency_sum, latency_count, max_latency_ms,"
        " min_latency_ms, updated_at) values (?, ?, ?, '', 12, 1, 5000, 9000, 11, 2000, 90, ?)",
        ((start, account, model, start) for start, account, model in buckets),
    )
    database.commit()
    database.close()
    return {"usage_records": usage_rows, "ops_error_logs": ops_rows, "buckets": len(buckets)}


def _fresh_database() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    from config.bootstrap import prepare

    prepare()
    django.setup()
    from django.conf import settings

    from config.embedded import database_url_for, maintenance_connection

    server = settings.DATABASES["default"]
    with maintenance_connection(server) as admin:
        admin.execute(f'drop database if exists "{DATABASE}" with (force)')
        admin.execute(f'create database "{DATABASE}"')
    return database_url_for(server, DATABASE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--usage-rows", type=int, default=250_000)
    arguments = parser.parse_args()
    work = ROOT / "var" / "bench" / "import"
    work.mkdir(parents=True, exist_ok=True)
    source = work / "source.sqlite"
    started = time.monotonic()
    counts = generate(source, arguments.usage_rows)
    print(f"generated {counts} ({source.stat().st_size / 1e6:.0f} MB) in "
          f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
    environment = {**os.environ, "DATABASE_URL": _fresh_database()}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT,
                   env=environment, check=True)  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "manage.py", "import_sqlite", str(source)],
        cwd=ROOT, env=environment, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return 1
    print(result.stdout)
    rows = counts["usage_records"] + counts["ops_error_logs"] + counts["buckets"]
    print(
        f"import_sqlite: {counts['usage_records']:,} v3 usage rows (+{counts['ops_error_logs']:,}"
        f" ops errors, {counts['buckets']:,} buckets) in {seconds:.1f} s = "
        f"{counts['usage_records'] / seconds:,.0f} usage rows/s ({rows / seconds:,.0f} rows/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
