"""The ledger writer's discipline (seed 004 §4.7, §2.10): a batch lands whole or not at all,
counters with it; a retry after an uncertain COMMIT never writes twice; rejected text is made
storable; only rows the database keeps refusing are given up, loudly and counted."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.db import connection
from django.utils import timezone

from proxy.dispatch import recording
from proxy.dispatch.recording import LedgerEntry, _Attempt, _Unit, _write_unit_in_thread
from proxy.models import AccountUsage
from proxy.services.account_usage import AccountUsageIncrement
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from tests.proxy.factories import make_account

pytestmark = pytest.mark.django_db(transaction=True)


def _success(account, request_id: str, **fields) -> LedgerEntry:
    usage = {
        "created_at": timezone.now(),
        "account_id": account.id,
        "model": "gpt-5.4",
        "message": "v1 responses stream completed",
        "request_id": request_id,
        "input_tokens": 10,
        **fields,
    }
    return LedgerEntry(
        usage=usage,
        account_usage=[(account.id, AccountUsageIncrement(counted_request=True, input_tokens=10))],
    )


def _written_in_own_transaction(entries: list[LedgerEntry]) -> int:
    """Write ``entries`` as the writer does and return that transaction's id."""
    attempt = _Attempt()
    recording._write_atomically(entries, attempt, sanitize=False)
    connection.close()
    return attempt.transaction_id


def test_a_retry_after_a_commit_that_landed_writes_nothing_twice():
    account = make_account()
    entries = [_success(account, "req-a"), _success(account, "req-b")]
    # The first attempt committed, but its connection died before the client heard so.
    committed = _written_in_own_transaction(entries)

    assert _write_unit_in_thread(_Unit(entries, in_doubt_transaction=committed)) is None

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-a", "req-b"]
    assert AccountUsage.objects.get(account=account).request_count == 2
    assert RequestTimeBucket.objects.get().success_count == 2


def test_a_retry_after_a_commit_that_did_not_land_writes_everything_once():
    account = make_account()
    entries = [_success(account, "req-a")]
    with connection.cursor() as cursor:  # a transaction that was rolled back
        cursor.execute("begin")
        cursor.execute("select txid_current()")
        aborted = cursor.fetchone()[0]
        cursor.execute("rollback")

    assert _write_unit_in_thread(_Unit(entries, in_doubt_transaction=aborted)) is None

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-a"]
    assert AccountUsage.objects.get(account=account).request_count == 1


def test_text_the_database_refuses_is_stored_with_replacement_characters(caplog):
    account = make_account()
    entries = [
        _success(account, "req-nul", model="gpt\x00-5", metadata={"topLevelFields": ["a\x00"]}),
        _success(account, "req-surrogate", upstream_model="half \ud83d of an emoji"),
        _success(account, "req-plain"),
    ]

    with caplog.at_level(logging.WARNING, logger="proxy.dispatch.recording"):
        assert _write_unit_in_thread(_Unit(entries)) is None

    rows = dict(UsageRecord.objects.values_list("request_id", "model"))
    assert rows == {"req-nul": "gpt\ufffd-5", "req-surrogate": "gpt-5.4", "req-plain": "gpt-5.4"}
    assert UsageRecord.objects.get(request_id="req-nul").metadata_json == {
        "topLevelFields": ["a\ufffd"]
    }
    assert UsageRecord.objects.get(request_id="req-surrogate").upstream_model == (
        "half \ufffd of an emoji"
    )
    assert AccountUsage.objects.get(account=account).request_count == 3
    assert "GIVEN UP" not in caplog.text


def test_only_a_row_the_database_keeps_refusing_is_given_up_loudly_and_counted(caplog):
    account = make_account()
    before = recording.ledger_stats().entries_given_up
    refused = _success(account, "req-refused", status_code=500)  # a CHECK: 200–399 only
    refused.errors.append({"created_at": timezone.now(), "message": "x", "request_id": "e-1"})
    entries = [_success(account, "req-good"), refused]

    with caplog.at_level(logging.ERROR, logger="proxy.dispatch.recording"):
        assert _write_unit_in_thread(_Unit(entries)) is None

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-good"]
    assert not OpsErrorLog.objects.exists()  # the refused entry is given up as a whole
    assert AccountUsage.objects.get(account=account).request_count == 1  # never its counter
    assert recording.ledger_stats().entries_given_up == before + 1
    assert "telemetry rows GIVEN UP" in caplog.text
    assert "req-refused" in caplog.text


def test_the_backlog_held_during_an_outage_is_bounded(monkeypatch, caplog):
    """Past MAX_BACKLOG the oldest held entries are given up, not the worker's memory."""
    account = make_account()
    monkeypatch.setattr(recording, "MAX_BACKLOG", 3)
    before = recording.ledger_stats().entries_given_up

    async def submit_five() -> None:
        writer = recording.LedgerWriter()
        for index in range(5):  # faster than the writer's first flush
            writer.submit(_success(account, f"req-{index}"))
        assert writer.backlog == 3
        await writer.flush()

    with caplog.at_level(logging.ERROR, logger="proxy.dispatch.recording"):
        asyncio.run(submit_five())

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == [
        "req-2",
        "req-3",
        "req-4",
    ]
    assert recording.ledger_stats().entries_given_up == before + 2
    assert "the in-memory backlog is full" in caplog.text
