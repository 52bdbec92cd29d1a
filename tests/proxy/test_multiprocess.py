"""The concurrency cap holds across separate uvicorn processes (slots live in Redis), and the
slots of a worker killed mid-stream are reclaimed after the TTL."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest
import redis
import requests
from django.conf import settings

from proxy.models import RuntimeSettings
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account

pytestmark = pytest.mark.subprocess

SLOT_TTL_SECONDS = 3


@pytest.fixture
def two_processes(upstream, transactional_db):
    from django.utils import timezone

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


def _stream(url: str, key: str) -> requests.Response:
    return requests.post(
        f"{url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": []}),
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def test_the_cap_holds_across_two_processes(two_processes, upstream, client_key):
    RuntimeSettings.objects.update(max_concurrent_per_account=2, request_interval_ms=0)
    make_pool_account("tok-shared")
    upstream.program("tok-shared", *[Reply(deltas=8, delta_delay=0.1) for _ in range(8)])
    results: list[int] = []

    def call(index: int) -> None:
        response = _stream(two_processes[index % 2].url, client_key.key)
        results.append(response.status_code)

    threads = [threading.Thread(target=call, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [200] * 8
    assert len(upstream.responses_requests()) == 8
    assert upstream.max_in_flight["tok-shared"] == 2


def test_a_killed_workers_slot_frees_after_the_ttl(two_processes, upstream, client_key):
    RuntimeSettings.objects.update(max_concurrent_per_account=1, request_interval_ms=0)
    account = make_pool_account("tok-solo")
    upstream.program("tok-solo", Reply(deltas=200, delta_delay=0.1), Reply())
    doomed, survivor = two_processes
    slots_key = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{account.id}"
    client = redis.Redis.from_url(settings.REDIS_URL)

    holder = threading.Thread(target=lambda: _swallow(lambda: _stream(doomed.url, client_key.key)))
    holder.start()
    deadline = time.monotonic() + 5
    while client.zcard(slots_key) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    doomed.kill()
    killed_at = time.monotonic()
    assert client.zcard(slots_key) == 1  # the dead worker's slot is still there

    response = requests.post(
        f"{survivor.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "stream": False}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=60,
    )
    waited = time.monotonic() - killed_at

    assert response.status_code == 200
    assert waited >= SLOT_TTL_SECONDS - 1.5  # it had to wait for the reclaim
    holder.join(10)
    client.close()


def _swallow(call) -> None:
    with contextlib.suppress(requests.RequestException):
        call()
