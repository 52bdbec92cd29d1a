"""A key's policy holds across separate uvicorn processes (its counters live in Redis), and the
in-flight slot of a worker killed mid-stream is reclaimed after the slot TTL."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
import requests
from django.conf import settings
from django.utils import timezone

from proxy.services.key_policies import PolicyValues, key_policy_set
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account

pytestmark = pytest.mark.subprocess

SLOT_TTL_SECONDS = 3
BODY = json.dumps({"model": "gpt-5.4", "input": "hi"})


@pytest.fixture
def two_processes(upstream, transactional_db):
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    processes = [
        UvicornProcess(upstream.url, SCHEDULER_SLOT_TTL_SECONDS=str(SLOT_TTL_SECONDS))
        for _ in range(2)
    ]
    yield processes
    for process in processes:
        process.stop()


def _post(url: str, key: str) -> requests.Response:
    return requests.post(
        f"{url}/v1/responses", data=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


def _in_flight(key_id: str) -> int:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return client.zcard(f"{settings.REDIS_KEY_PREFIX}policy:in_flight:{key_id}")
    finally:
        client.close()


def _hold_stream(url: str, key: str, started: threading.Event, release: threading.Event):
    try:
        with requests.post(
            f"{url}/v1/responses",
            data=BODY,
            headers={"Authorization": f"Bearer {key}"},
            stream=True,
            timeout=60,
        ) as response:
            chunks = response.iter_content(chunk_size=None)
            next(chunks)
            started.set()
            release.wait(30)
            for _ in chunks:
                pass
    except requests.RequestException:
        started.set()


def test_concurrency_limit_holds_across_two_processes(two_processes, upstream, client_key):
    first, second = two_processes
    make_pool_account("tok-two")
    upstream.program("tok-two", Reply(deltas=20, delta_delay=0.05), Reply())
    key_policy_set(
        key=client_key, values=PolicyValues(max_concurrent_requests=1), now=timezone.now()
    )
    started, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=_hold_stream, args=(first.url, client_key.key, started, release)
    )
    holder.start()
    assert started.wait(30)

    refused = _post(second.url, client_key.key)
    release.set()
    holder.join(30)
    deadline = time.monotonic() + 10
    while _in_flight(client_key.id) and time.monotonic() < deadline:
        time.sleep(0.05)
    admitted = _post(second.url, client_key.key)

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "key_concurrency_limited"
    assert refused.headers["Retry-After"] == "1"
    assert admitted.status_code == 200
    assert len(upstream.responses_requests()) == 2


def test_requests_per_minute_is_one_count_for_both_processes(two_processes, upstream, client_key):
    make_pool_account("tok-rpm-two")
    key_policy_set(key=client_key, values=PolicyValues(requests_per_minute=3), now=timezone.now())

    statuses = [
        _post(two_processes[index % 2].url, client_key.key).status_code for index in range(5)
    ]

    assert statuses == [200, 200, 200, 429, 429]
    assert len(upstream.responses_requests()) == 3


def test_a_killed_workers_key_slot_frees_after_the_ttl(two_processes, upstream, client_key):
    doomed, survivor = two_processes
    make_pool_account("tok-doomed")
    upstream.program("tok-doomed", Reply(deltas=200, delta_delay=0.1))
    key_policy_set(
        key=client_key, values=PolicyValues(max_concurrent_requests=1), now=timezone.now()
    )
    started, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=_hold_stream, args=(doomed.url, client_key.key, started, release)
    )
    holder.start()
    assert started.wait(30)
    doomed.kill()
    release.set()

    refused = _post(survivor.url, client_key.key)  # the dead worker's slot still counts
    deadline = time.monotonic() + SLOT_TTL_SECONDS + 10
    admitted = refused
    while admitted.status_code == 429 and time.monotonic() < deadline:
        time.sleep(0.25)
        admitted = _post(survivor.url, client_key.key)
    holder.join(10)

    assert refused.status_code == 429
    assert admitted.status_code == 200
