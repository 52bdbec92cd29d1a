"""The ledger writer's discipline (seed 004 §4.7, §2.10): a batch lands whole or not at all,
counters with it; a retry after an uncertain COMMIT never writes twice; rejected text is made
storable; only rows the database keeps refusing are given up, loudly and counted."""

from __future__ import annotations

import asyncio
import logging
import secrets

import pytest
from django.db import connection
from django.utils import timezone

from proxy import redis_keys
from proxy.ledger import writer as ledger_writer
from proxy.ledger.writer import LedgerEntry, _Attempt, _Unit, _write_unit_in_thread
from proxy.loop_resources import close_current_loop_resources
from proxy.models import AccountUsage
from proxy.services.account_usage import AccountUsageIncrement
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from telemetry.services.facts import ErrorFact, UsageFact
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
        usage=UsageFact(**usage),
        account_usage=[(account.id, AccountUsageIncrement(counted_request=True, input_tokens=10))],
    )


def _written_in_own_transaction(entries: list[LedgerEntry]) -> int:
    """Write ``entries`` as the writer does and return that transaction's id."""
    attempt = _Attempt()
    ledger_writer._write_atomically(entries, attempt, sanitize=False)
    connection.close()
    return attempt.transaction_id


def test_a_retry_after_a_commit_that_landed_writes_nothing_twice():
    account = make_account()
    entries = [_success(account, "req-a"), _success(account, "req-b")]
    # The first attempt committed, but its connection died before the client heard so.
    committed = _written_in_own_transaction(entries)

    unit = _Unit(entries, in_doubt_transaction=committed, in_doubt_count=len(entries))
    assert _write_unit_in_thread(unit) is None

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

    unit = _Unit(entries, in_doubt_transaction=aborted, in_doubt_count=len(entries))
    assert _write_unit_in_thread(unit) is None

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-a"]
    assert AccountUsage.objects.get(account=account).request_count == 1


def test_text_the_database_refuses_is_stored_with_replacement_characters(caplog):
    account = make_account()
    entries = [
        _success(account, "req-nul", model="gpt\x00-5", metadata={"topLevelFields": ["a\x00"]}),
        _success(account, "req-surrogate", upstream_model="half \ud83d of an emoji"),
        _success(account, "req-plain"),
    ]

    with caplog.at_level(logging.WARNING, logger="proxy.ledger.writer"):
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
    before = ledger_writer.ledger_stats().entries_given_up
    refused = _success(account, "req-refused", status_code=500)  # a CHECK: 200–399 only
    refused.errors.append(ErrorFact(created_at=timezone.now(), message="x", request_id="e-1"))
    entries = [_success(account, "req-good"), refused]

    with caplog.at_level(logging.ERROR, logger="proxy.ledger.writer"):
        assert _write_unit_in_thread(_Unit(entries)) is None

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-good"]
    assert not OpsErrorLog.objects.exists()  # the refused entry is given up as a whole
    assert AccountUsage.objects.get(account=account).request_count == 1  # never its counter
    assert ledger_writer.ledger_stats().entries_given_up == before + 1
    assert "telemetry rows GIVEN UP" in caplog.text
    assert "req-refused" in caplog.text


def test_the_backlog_held_during_an_outage_is_bounded(monkeypatch, caplog, redis_client):
    """Past MAX_BACKLOG the oldest held entries are given up, not the worker's memory; the
    count of given-up entries is where operators can read it (Redis), not only in the log."""
    account = make_account()
    monkeypatch.setattr(ledger_writer, "MAX_BACKLOG", 3)
    before = ledger_writer.ledger_stats().entries_given_up
    monkeypatch.setattr(ledger_writer, "_published_given_up", before)  # earlier tests' are not ours
    counter = redis_keys.ledger_rows_given_up()
    counted_before = int(redis_client.get(counter) or 0)

    async def submit_five() -> None:
        writer = ledger_writer.LedgerWriter()
        for index in range(5):  # faster than the writer's first flush
            writer.submit(_success(account, f"req-{index}"))
        assert writer.backlog == 3
        await writer.flush()
        await close_current_loop_resources()

    with caplog.at_level(logging.ERROR, logger="proxy.ledger.writer"):
        asyncio.run(submit_five())

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == [
        "req-2",
        "req-3",
        "req-4",
    ]
    assert ledger_writer.ledger_stats().entries_given_up == before + 2
    assert "the in-memory backlog is full" in caplog.text
    assert int(redis_client.get(counter)) == counted_before + 2
    assert 0 < redis_client.ttl(counter) <= ledger_writer.GIVEN_UP_COUNTER_TTL_SECONDS


def test_a_retry_writes_what_the_in_doubt_transaction_did_not_hold():
    """Row by row, a COMMIT whose answer was lost covered one entry: the next ones are still
    written once that one is known to have landed."""
    account = make_account()
    first, second = _success(account, "req-1"), _success(account, "req-2")
    committed = _written_in_own_transaction([first])

    unit = _Unit([first, second], in_doubt_transaction=committed, in_doubt_count=1)
    assert _write_unit_in_thread(unit) is None

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-1", "req-2"]
    assert AccountUsage.objects.get(account=account).request_count == 2


def test_a_transaction_the_server_does_not_know_is_written_again_not_given_up():
    """After a failover to a standby that never received the old COMMIT, txid_status answers
    "in the future": the entries did not commit there and are written."""
    account = make_account()
    before = ledger_writer.ledger_stats().entries_given_up
    entries = [_success(account, "req-a"), _success(account, "req-b")]

    unit = _Unit(entries, in_doubt_transaction=10**12, in_doubt_count=2)
    assert _write_unit_in_thread(unit) is None

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-a", "req-b"]
    assert ledger_writer.ledger_stats().entries_given_up == before


def test_a_value_the_database_refuses_is_not_retried_forever():
    """An index row too large is an OperationalError in psycopg's classes, but it is the row
    that is wrong: it is given up and the good row beside it is written at once."""
    account = make_account()
    before = ledger_writer.ledger_stats().entries_given_up
    incompressible = secrets.token_urlsafe(15_000)  # ~20,000 characters, past a btree entry
    entries = [_success(account, "req-huge", response_id=incompressible), _success(account, "ok")]

    assert _write_unit_in_thread(_Unit(entries)) is None  # nothing left to retry

    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["ok"]
    assert ledger_writer.ledger_stats().entries_given_up == before + 1


@pytest.fixture
def connection_killed_once_during_copy():
    """The first usage_records row written kills its own backend (a failover mid-batch); the
    sequence is not transactional, so the retry's rows go through."""
    with connection.cursor() as cursor:
        cursor.execute("create sequence ledger_kill_once")
        cursor.execute(
            "create function ledger_kill_once() returns trigger language plpgsql as $$"
            " begin if nextval('ledger_kill_once') = 1 then"
            " perform pg_terminate_backend(pg_backend_pid()); end if; return new; end $$"
        )
        cursor.execute(
            "create trigger ledger_kill_once before insert on usage_records"
            " for each row execute function ledger_kill_once()"
        )
    yield
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("drop trigger if exists ledger_kill_once on usage_records")
        cursor.execute("drop function if exists ledger_kill_once()")
        cursor.execute("drop sequence if exists ledger_kill_once")


def test_a_batch_cut_by_a_dying_connection_is_retried_and_written_once(
    connection_killed_once_during_copy,
):
    account = make_account()
    entries = [_success(account, f"req-{index}") for index in range(5)]
    connection.close()

    left = _write_unit_in_thread(_Unit(entries))

    assert left is not None and len(left.entries) == 5  # all of it, to be written again
    assert not UsageRecord.objects.exists()  # the cut transaction left nothing behind
    assert _write_unit_in_thread(left) is None
    assert UsageRecord.objects.count() == 5
    assert AccountUsage.objects.get(account=account).request_count == 5
    assert RequestTimeBucket.objects.get().success_count == 5
