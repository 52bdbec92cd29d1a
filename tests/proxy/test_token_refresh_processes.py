"""Token refresh across processes: two real Celery worker processes racing for one account,
and ``refresh_concurrency`` holding across them (a Redis semaphore, not a per-process one)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from proxy.models import Account, RuntimeSettings
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.tasks import refresh_account_token_task
from tests.conftest import CeleryWorkerProcess, fakes_environment, run_database_url
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account

pytestmark = pytest.mark.subprocess

QUEUE = "refresh-processes"
ALICE = Identity("org-alice", "user-alice", "plus", "alice@example.com")
BOB = Identity("org-bob", "user-bob", "pro", "bob@example.com")


@pytest.fixture(scope="module")
def two_workers(
    django_db_setup, django_db_blocker, tmp_path_factory, fake_codex, fake_oauth, fake_appcast
):
    """Two worker processes (one task at a time each) on a queue of their own."""
    environment = fakes_environment(fake_codex, fake_oauth, fake_appcast)
    folder = tmp_path_factory.mktemp("refresh-workers")
    workers = [
        CeleryWorkerProcess(
            run_database_url(django_db_blocker),
            folder / f"worker-{index}.log",
            environment,
            arguments=("--pool", "solo", "-Q", QUEUE, "-n", f"refresh{index}@%h"),
        )
        for index in range(2)
    ]
    yield workers
    for worker in workers:
        worker.stop()


def _send(account_id: str):
    return refresh_account_token_task.apply_async(
        args=[account_id], queue=QUEUE, ignore_result=False
    )


def _received_by(worker: CeleryWorkerProcess) -> int:
    return sum(
        1
        for line in worker.log_path.read_text().splitlines()
        if "proxy.refresh_account_token[" in line and "received" in line.lower()
    )


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_for_one_account_make_one_token_call(two_workers, oauth):
    runtime_settings_ensure(now=timezone.now())
    account = make_oauth_account(oauth, ALICE, expires_in=60)
    spent = account.refresh_token
    oauth.delay = 1.5  # the first refresher still waits for its answer when the second comes
    before = [_received_by(worker) for worker in two_workers]

    pending = [_send(account.pk), _send(account.pk)]
    outcomes = sorted(result.get(timeout=60) for result in pending)

    # both processes took one task each
    after = [_received_by(worker) for worker in two_workers]
    assert [now - then for now, then in zip(after, before, strict=True)] == [1, 1]
    assert outcomes == ["lease_busy", "refreshed"]
    assert [call["refresh_token"] for call in oauth.token_calls()] == [spent]
    row = Account.objects.get(pk=account.pk)
    assert row.refresh_token == oauth.issued_refresh_tokens[-1]
    assert oauth.is_live(row.refresh_token) and oauth.is_spent(spent)
    assert row.status == "active"

    # A refresh queued before the first one finished comes later: it re-reads the row, sees the
    # refresh happened, and does nothing (no second call with a spent token).
    oauth.delay = 0
    assert _send(account.pk).get(timeout=60) == "not_due"
    assert len(oauth.token_calls()) == 1
    assert Account.objects.get(pk=account.pk).refresh_token == row.refresh_token


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", [1, 2])
def test_refresh_concurrency_holds_across_processes(two_workers, oauth, concurrency):
    runtime_settings_ensure(now=timezone.now())
    RuntimeSettings.objects.update(refresh_concurrency=concurrency)
    accounts = [make_oauth_account(oauth, identity) for identity in (ALICE, BOB)]
    oauth.delay = 1.0

    pending = [_send(account.pk) for account in accounts]
    outcomes = [result.get(timeout=60) for result in pending]

    assert outcomes == ["refreshed", "refreshed"]
    assert len(oauth.token_calls()) == 2
    assert oauth.max_in_flight == concurrency
