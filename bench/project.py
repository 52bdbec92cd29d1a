"""The project as the benchmarks run it: migrated and seeded on the bench's PostgreSQL and
Redis (bench/seed.py), its web process started exactly as ``make run`` starts it
(``python -m config.run web``: uvicorn's workers, the multiprocess metrics, the start-up checks),
with the fake upstream as its Codex backend."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.stores import prepared_store_env

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Project:
    process: subprocess.Popen
    port: int
    key: str
    env: dict[str, str]


def project_env(fake_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every project process of a bench run. LOG_LEVEL=warning: no access
    log line per request (``make run``'s default level, info, writes one)."""
    return {
        **os.environ,
        **prepared_store_env(),
        "CODEX_UPSTREAM_BASE": fake_url,
        "LOG_LEVEL": "warning",
        # The console's first admin (the web refuses to start without one); never used here.
        "CPR_ADMIN_DEFAULT_PASSWORD": secrets.token_urlsafe(18),
        **(extra or {}),
    }


def prepare_project(env: dict[str, str], *, accounts: int, key_policy: bool) -> str:
    """Migrate the bench database and seed it (bench/seed.py); returns the client key."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    seeded = subprocess.run(
        [sys.executable, "-m", "bench.seed", "populate", "--accounts", str(accounts)]
        + (["--key-policy"] if key_policy else []),
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(seeded.stdout)["key"]


def web_command() -> list[str]:
    return [sys.executable, "-m", "config.run", "web"]


def web_env(env: dict[str, str], *, port: int, workers: int) -> dict[str, str]:
    return {**env, "HOST": "127.0.0.1", "PORT": str(port), "WEB_WORKERS": str(workers)}
