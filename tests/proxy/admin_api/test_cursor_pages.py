"""Every list of the admin API walks the same rows by keyset cursor as by page number: newest
first, ties on the time broken by id (descending), nothing repeated, nothing skipped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.services.client_api_keys import client_api_key_create
from telemetry.services.ledger import ops_error_log_create
from tests.proxy.admin_api.conftest import data_of
from tests.proxy.factories import make_account


def _walk_by_cursor(api, path: str, key: str) -> list[str]:
    seen, cursor, pages = [], None, 0
    while True:
        query = "pageSize=2" + (f"&cursor={cursor}" if cursor else "")
        page = data_of(api.get(f"{path}?{query}"))
        seen += [item[key] for item in page["items"]]
        cursor = page["page"]["nextCursor"]
        pages += 1
        assert pages < 50
        if not cursor:
            return seen


def _walk_by_number(api, path: str, key: str) -> list[str]:
    seen, number = [], 1
    while True:
        page = data_of(api.get(f"{path}?pageSize=2&page={number}"))
        seen += [item[key] for item in page["items"]]
        if number >= page["page"]["totalPages"]:
            return seen
        number += 1


def _seed(kind: str) -> list[str]:
    """Seven rows: three share one moment (the id decides), the rest one second apart.
    Returns their ids newest first, as computed here."""
    base = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    moments = [base, base, base, *(base - timedelta(seconds=s) for s in (1, 2, 3, 4))]
    rows = []
    for index, moment in enumerate(moments):
        if kind == "accounts":
            row_id = make_account(id=f"acct_{index:02d}_{'abc'[index % 3]}", added_at=moment).pk
        elif kind == "keys":
            row_id = client_api_key_create(name=f"key {index}", now=moment).pk
        else:
            row_id = ops_error_log_create(created_at=moment, message=f"boom {index}").pk
        rows.append((moment, row_id))
    return [row_id for _, row_id in sorted(rows, key=lambda row: (row[0], row[1]), reverse=True)]


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("accounts", "/api/admin/accounts"),
        ("keys", "/api/admin/keys"),
        ("ops", "/api/admin/ops/errors"),
    ],
)
def test_a_list_walked_by_cursor_equals_the_list_walked_by_page(api, kind, path):
    expected = _seed(kind)

    by_cursor = _walk_by_cursor(api, path, "id")
    by_number = _walk_by_number(api, path, "id")

    assert by_cursor == expected
    assert by_number == expected
