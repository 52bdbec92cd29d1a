"""Fair admission through the proxy (issue 25 item 2): with the only account at its cap, a
heavy key's six waiting requests and a light key's two, spread over two server processes, are
admitted alternately once slots free up — not first-come; a FLUSHALL mid-wait leaves nothing
wedged."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import requests
from django.conf import settings
from django.utils import timezone

from proxy import redis_keys
from proxy.models import RuntimeSettings
from proxy.services.client_api_keys import client_api_key_create
from tests.proxy.conftest import UvicornProcess, make_pool_account

HOLDER = "held-by-the-test"


def _post(url: str, key, marker: str) -> requests.Response:
    return requests.post(
        f"{url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": marker, "stream": False}),
        headers={"Authorization": f"Bearer {key.key}"},
        timeout=90,
    )


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _fill_the_pool(client: redis.Redis, account_id: str) -> None:
    """The account's one slot, taken by the test (as a request in flight would hold it)."""
    client.zadd(redis_keys.account_slots(account_id), {HOLDER: int(time.time() * 1000)})


def _waiting(client: redis.Redis, key) -> int:
    return client.zcard(redis_keys.fair_queue(key.id))


def _markers_in_upstream_order(upstream) -> list[str]:
    """The markers ("A0", "B1", ...) of the requests the upstream received, in arrival order."""
    bodies = [json.dumps(request.json()) for request in upstream.responses_requests()]
    return [body.split("fair-")[1][:2] for body in bodies]


def _fair_keys_of_this_run(client) -> list[str]:
    # The Redis is shared with the other xdist workers, whose keys have prefixes of their own.
    return [key.decode() for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}*fair:*")]


@pytest.fixture
def one_slot_pool(proxy, upstream):
    RuntimeSettings.objects.update(max_concurrent_per_account=1)
    account = make_pool_account("tok-fair")
    yield account
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}fair:*"):
        client.delete(key)


@pytest.mark.subprocess
def test_fair_admission_across_two_keys_under_contention(proxy, upstream, one_slot_pool):
    heavy = client_api_key_create(name="heavy", now=timezone.now())
    light = client_api_key_create(name="light", now=timezone.now())
    other_process = UvicornProcess(upstream.url)
    servers = [proxy.url, other_process.url]
    client = redis.Redis.from_url(settings.REDIS_URL)
    _fill_the_pool(client, one_slot_pool.pk)
    try:
        with ThreadPoolExecutor(8) as pool:
            # The heavy key's six requests wait first, then the light key's two.
            answers = [
                pool.submit(_post, servers[index % 2], heavy, f"fair-A{index}")
                for index in range(6)
            ]
            _wait_until(lambda: _waiting(client, heavy) == 6, "six heavy requests waiting")
            answers += [
                pool.submit(_post, servers[index % 2], light, f"fair-B{index}")
                for index in range(2)
            ]
            _wait_until(lambda: _waiting(client, light) == 2, "two light requests waiting")
            client.zrem(redis_keys.account_slots(one_slot_pool.pk), HOLDER)
            statuses = [answer.result().status_code for answer in answers]
    finally:
        other_process.stop()

    assert statuses == [200] * 8
    # One slot: each admitted request reaches the upstream before the next is admitted.
    assert [marker[0] for marker in _markers_in_upstream_order(upstream)] == list("ABABAAAA")
    assert _fair_keys_of_this_run(client) == [redis_keys.fair_sequence()]


def test_a_flushall_mid_wait_leaves_nothing_wedged(private_proxy, private_redis, upstream):
    RuntimeSettings.objects.update(max_concurrent_per_account=1)
    account = make_pool_account("tok-flush")
    heavy = client_api_key_create(name="heavy", now=timezone.now())
    light = client_api_key_create(name="light", now=timezone.now())
    client = redis.Redis.from_url(private_redis.url)
    _fill_the_pool(client, account.pk)
    with ThreadPoolExecutor(4) as pool:
        answers = [pool.submit(_post, private_proxy.url, heavy, f"fair-A{i}") for i in range(3)]
        answers.append(pool.submit(_post, private_proxy.url, light, "fair-B0"))
        _wait_until(
            lambda: (_waiting(client, heavy), _waiting(client, light)) == (3, 1),
            "four requests waiting",
        )
        client.flushall()  # the registry, the rotation and the held slot all go
        statuses = [answer.result().status_code for answer in answers]
    private_proxy.drain()

    assert statuses == [200] * 4
    assert sorted(_markers_in_upstream_order(upstream)) == ["A0", "A1", "A2", "B0"]
    assert [key.decode() for key in client.scan_iter(match="*fair:*")] == [
        redis_keys.fair_sequence()
    ]
    assert client.zcard(redis_keys.account_slots(account.pk)) == 0


def test_a_request_that_gives_up_waiting_leaves_no_trace(proxy, upstream, one_slot_pool, settings):
    key = client_api_key_create(name="patient", now=timezone.now())
    client = redis.Redis.from_url(settings.REDIS_URL)
    _fill_the_pool(client, one_slot_pool.pk)
    # One client leaves while its request waits (long before its wait could time out)...
    settings.SCHEDULER_WAIT_TIMEOUT_SECONDS = 600
    body = json.dumps({"model": "gpt-5.4", "input": "fair-L0", "stream": False}).encode()
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as leaving:
        leaving.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {key.key}\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        _wait_until(lambda: _waiting(client, key) == 1, "the request waiting")
    _wait_until(lambda: _waiting(client, key) == 0, "the leaving client's place given up")
    # ... the other waits out the timeout.
    settings.SCHEDULER_WAIT_TIMEOUT_SECONDS = 2
    timed_out = _post(proxy.url, key, "fair-T0")

    assert timed_out.status_code == 503
    assert timed_out.json()["error"]["code"] == "no_available_accounts"
    assert _fair_keys_of_this_run(client) == [redis_keys.fair_sequence()]
    assert upstream.responses_requests() == []
