"""When PostgreSQL connections drop (a failover, a restart, an idle timeout) nothing is lost and
nobody is wrongly refused: every completed request keeps exactly one ledger row and its counter,
dead pooled connections are replaced, and a key that cannot be checked is a 503, not a 401."""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from proxy.models import AccountUsage, RuntimeSettings
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from tests.database_faults import DatabaseRelay
from tests.proxy.conftest import UvicornProcess, make_pool_account, post_responses


def _terminate_other_connections() -> int:
    """pg_terminate_backend for every other connection to this run's database (the server
    stays up, as after a failover or an idle-timeout kill), once their backends have exited.
    Returns how many were killed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select array_agg(pid) filter (where pg_terminate_backend(pid)) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        )
        killed = cursor.fetchone()[0] or []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            cursor.execute("select count(*) from pg_stat_activity where pid = any(%s)", [killed])
            if cursor.fetchone()[0] == 0:
                break
            time.sleep(0.01)
    return len(killed)


def _stream(proxy, key, request_id: str) -> tuple[int, bool]:
    """One streamed /v1/responses: (status, whether the client saw response.completed)."""
    response = post_responses(
        proxy, key, {"model": "gpt-5.4", "input": "hi"}, **{"x-request-id": request_id}
    )
    return response.status_code, b"event: response.completed" in response.content


def _assert_ledger_matches(completed: set[str]) -> None:
    """Every completed request has exactly one usage row, nothing is in both tables, the
    buckets equal the facts and the lifetime counter equals the successes."""
    usage_ids = list(UsageRecord.objects.values_list("request_id", flat=True))
    error_ids = set(OpsErrorLog.objects.values_list("request_id", flat=True))
    missing = completed - set(usage_ids)
    assert not missing, f"{len(missing)} completed requests have no usage row"
    assert len(usage_ids) == len(set(usage_ids)), "a request has two usage rows"
    assert not (set(usage_ids) & error_ids), "a request is in both tables"
    buckets = RequestTimeBucket.objects.aggregate(
        successes=Sum("success_count"), errors=Sum("error_count"), tokens=Sum("input_tokens")
    )
    assert buckets["successes"] == len(usage_ids)
    assert (buckets["errors"] or 0) == len(error_ids)
    assert buckets["tokens"] == UsageRecord.objects.aggregate(tokens=Sum("input_tokens"))["tokens"]
    assert AccountUsage.objects.aggregate(requests=Sum("request_count"))["requests"] == len(
        usage_ids
    )


@pytest.mark.slow
def test_terminated_connections_under_streamed_load_lose_no_ledger_row(proxy, upstream, client_key):
    """Three terminations while 32 clients stream: the ledger still has every success once."""
    RuntimeSettings.objects.update(max_concurrent_per_account=64, request_interval_ms=0)
    for index in range(4):
        make_pool_account(f"tok-load-{index}")
    total = 480
    done = threading.Semaphore(0)
    outcomes: dict[str, tuple[int, bool]] = {}

    def one(request_id: str) -> None:
        outcomes[request_id] = _stream(proxy, client_key, request_id)
        done.release()

    killed = []
    with ThreadPoolExecutor(max_workers=32) as clients:
        request_ids = [f"load-{uuid.uuid4().hex}" for _ in range(total)]
        for request_id in request_ids:
            clients.submit(one, request_id)
        for threshold in (100, 220, 340):  # terminate while the load is running
            while len(outcomes) < threshold:
                done.acquire(timeout=60)
            killed.append(_terminate_other_connections())
    proxy.drain()

    assert all(count > 0 for count in killed), killed
    statuses = [status for status, _ in outcomes.values()]
    assert statuses.count(200) == total, {status: statuses.count(status) for status in statuses}
    completed = {request_id for request_id, (_, seen) in outcomes.items() if seen}
    assert len(completed) == total
    _assert_ledger_matches(completed)


@pytest.mark.slow
def test_after_idle_connections_are_terminated_the_next_requests_all_succeed(
    proxy, upstream, client_key
):
    RuntimeSettings.objects.update(max_concurrent_per_account=64, request_interval_ms=0)
    make_pool_account("tok-idle")
    with ThreadPoolExecutor(max_workers=16) as clients:  # grow the pools to many connections
        warm = list(clients.map(lambda _: _stream(proxy, client_key, uuid.uuid4().hex), range(32)))
    assert [status for status, _ in warm] == [200] * 32
    proxy.drain()

    assert _terminate_other_connections() > 1

    after = [_stream(proxy, client_key, f"after-{index}") for index in range(40)]
    assert [status for status, _ in after] == [200] * 40
    proxy.drain()
    _assert_ledger_matches({f"after-{index}" for index in range(40)})


@pytest.fixture
def relayed_process(upstream, transactional_db):
    """A web process whose database connections all pass through a relay the test can cut."""
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    relay = DatabaseRelay(settings.DATABASES["default"])
    process = UvicornProcess(upstream.url, DATABASE_URL=relay.url(connection.settings_dict["NAME"]))
    yield relay, process
    process.stop()
    relay.cut()


def _post(url: str, key: str, request_id: str) -> requests.Response:
    return requests.post(
        f"{url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": "hi"}),
        headers={"Authorization": f"Bearer {key}", "x-request-id": request_id},
        timeout=30,
    )


@pytest.mark.subprocess
def test_a_key_that_cannot_be_checked_is_a_503_and_the_process_recovers(
    relayed_process, upstream, client_key
):
    relay, process = relayed_process
    make_pool_account("tok-relay")
    assert _post(process.url, client_key.key, "before").status_code == 200

    relay.cut()
    refused = _post(process.url, client_key.key, "during-outage")
    models = requests.get(
        f"{process.url}/v1/models",
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.headers["x-request-id"] == "during-outage"
    assert refused.json() == {
        "error": {
            "message": "The proxy could not reach its database. Retry the request shortly.",
            "type": "server_error",
            "code": "database_unavailable",
        }
    }
    assert models.status_code == 503
    assert models.json()["error"]["code"] == "database_unavailable"

    relay.restore()
    statuses = []
    for index in range(40):  # recovers by itself, without a restart
        statuses.append(_post(process.url, client_key.key, f"recovered-{index}").status_code)
        if statuses[-1] == 200:
            break
    assert statuses[-1] == 200, statuses
    assert set(statuses) <= {200, 503}, statuses  # never a 401 for a good key
    after = [_post(process.url, client_key.key, f"after-{index}").status_code for index in range(5)]
    assert after == [200] * 5

    # The refusal was kept in memory while the database was away, and written once it is back.
    def refusal_rows() -> list[tuple]:
        return list(
            OpsErrorLog.objects.filter(request_id="during-outage").values_list(
                "status_code", "failure_class", "route"
            )
        )

    deadline = time.monotonic() + 20
    while not refusal_rows() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert refusal_rows() == [(503, "database_unavailable", "/v1/responses")]
    assert not UsageRecord.objects.filter(request_id="during-outage").exists()


@pytest.mark.subprocess
def test_a_database_that_stops_answering_is_a_503_not_a_hung_request(
    relayed_process, upstream, client_key
):
    """A partition: connections stay open but nothing comes back. The key lookup gives up
    within its budget instead of waiting for the kernel's TCP timeouts."""
    relay, process = relayed_process
    make_pool_account("tok-frozen")
    assert _post(process.url, client_key.key, "before-freeze").status_code == 200

    relay.freeze()
    try:
        refused = _post(process.url, client_key.key, "frozen")  # the request's own timeout: 30 s
    finally:
        relay.thaw()

    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "database_unavailable"
    statuses = []
    for index in range(40):
        statuses.append(_post(process.url, client_key.key, f"thawed-{index}").status_code)
        if statuses[-1] == 200:
            break
    assert statuses[-1] == 200, statuses
