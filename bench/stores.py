"""The stores a bench run measures against: ``bench.seed prepare`` (in its own process, so
this one never sets Django up) starts or reuses them and says where they are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepared_store_env() -> dict[str, str]:
    """The environment that points a project process at the bench's PostgreSQL and Redis
    (its own Redis key prefix, so a bench never touches the project's keys)."""
    prepared = json.loads(
        subprocess.run(
            [sys.executable, "-m", "bench.seed", "prepare"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    return {
        "DATABASE_URL": prepared["database_url"],
        "REDIS_URL": prepared["redis_url"],
        "REDIS_KEY_PREFIX": "cprbench:",
    }
