"""Seed 004 §2.7 / §4.7 for the admin API's reads: no ``->>`` and no metadata search — the
debug metadata is shown, never queried."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
READERS = [
    *(ROOT / "proxy" / "admin_api").rglob("*.py"),
    *(ROOT / "telemetry" / "queries").rglob("*.py"),
]


def test_no_reader_of_the_admin_api_queries_the_metadata():
    offenders = {}
    for path in READERS:
        text = path.read_text()
        found = re.findall(r"->>|metadata_json__|metadata_json\s*->|jsonb_path|@>", text)
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert READERS and offenders == {}
