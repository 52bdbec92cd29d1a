"""Outside review of issue 34: attacks that the merged work does not withstand (each test here
fails on main at b73145a; see the review report).

1. Item 8 — a *new* key (no usage rows this month, so no cost hint) with a daily budget fires
   requests at once whose bodies are small and whose answers are not: each reserves only its
   body's input price, so all are admitted and the budget is passed many times over (the
   issue's own attack; the merged test only holds because its 80 KB body makes the body
   estimate ~90 % of the real cost).
2. Item 1 — key A's response id stays A's only while its affinity record lives (4 h TTL, or
   until a FLUSHALL / eviction, which seed §2.9 allows at any time). After that, key B
   presenting it is an "unknown" id, sent untouched to one account — A's own when it is the
   one picked — and the upstream continues A's conversation for B.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
import requests
from django.conf import settings
from django.utils import timezone

from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.billing import request_cost
from telemetry.models import UsageRecord
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses
from tests.proxy.test_graceful_stop import web_process  # noqa: F401

SECRET = "the vault code is 7741-ALPHA"
# What each answer really costs: 1k input and 5k output tokens of gpt-5.4 ($0.0775).
USAGE = {
    "input_tokens": 1000,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5000,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 6000,
}
ONE_REQUEST = request_cost(
    model="gpt-5.4", service_tier=None, input_tokens=1000, output_tokens=5000, cached_tokens=0
).total
BUDGET = Decimal("0.30")


def _ledger_spend(key) -> float:
    return sum(
        request_cost(
            model=row.model,
            service_tier=row.service_tier,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cached_tokens=row.cached_tokens,
        ).total
        for row in UsageRecord.objects.filter(client_api_key_id=key.id)
    )


def _new_key_with_a_budget(upstream, key) -> None:
    make_pool_account("tok-a")
    key_policy_set(key=key, values=PolicyValues(daily_budget_usd=BUDGET), now=timezone.now())
    upstream.default_reply = Reply(usage=USAGE, first_byte_delay=1.0)
    upstream.compact_payload = {
        "id": "resp_compacted",
        "object": "response.compaction",
        "output": [{"type": "compaction", "encrypted_content": "gAAAA"}],
        "usage": USAGE,
    }


def _one(base: str, key, index: int) -> requests.Response:
    """A small request: a compact, a stream or a non-stream call, by ``index``."""
    body = {"model": "gpt-5.4", "input": [{"role": "user", "content": "write an essay"}]}
    path = "/v1/responses"
    if index % 3 == 0:
        path = "/v1/responses/compact"
    else:
        body["stream"] = index % 3 == 1
    return requests.post(
        f"{base}{path}", json=body, headers={"Authorization": f"Bearer {key.key}"}, timeout=60
    )


def _fire(base: str, key, count: int) -> list[requests.Response]:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda index: _one(base, key, index), range(count)))


@pytest.mark.parametrize("count", [30, 50])
def test_parallel_small_requests_of_a_new_key_stay_within_one_requests_cost_of_the_budget(
    proxy, upstream, client_key, count
):
    _new_key_with_a_budget(upstream, client_key)

    answers = _fire(proxy.url, client_key, count)
    proxy.drain()

    served = sum(answer.status_code == 200 for answer in answers)
    spent = _ledger_spend(client_key)
    # Observed at b73145a: every request served, $2.33 (30) / $3.88 (50) on a $0.30 budget.
    assert spent <= float(BUDGET) + ONE_REQUEST, f"${spent:.3f} spent, {served}/{count} served"


def test_thirty_parallel_requests_of_a_new_key_on_the_real_web_process(
    web_process,  # noqa: F811
    upstream,
    client_key,
):
    _, base, _ = web_process
    _new_key_with_a_budget(upstream, client_key)

    answers = _fire(base, client_key, 30)
    served = sum(answer.status_code == 200 for answer in answers)
    deadline = time.monotonic() + 30
    while UsageRecord.objects.filter(client_api_key_id=client_key.id).count() < served:
        assert time.monotonic() < deadline, "the web process never wrote its usage rows"
        time.sleep(0.2)

    spent = _ledger_spend(client_key)
    assert spent <= float(BUDGET) + ONE_REQUEST, f"${spent:.3f} spent, {served}/30 served"


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_key_b_with_key_as_id_after_its_affinity_record_lapsed_never_reaches_as_conversation(
    proxy, upstream, client_key, redis_client
):
    key_b = client_api_key_create(name="key b", now=timezone.now())
    make_pool_account("tok-a")
    first = post_responses(
        proxy,
        client_key,
        {"model": "gpt-5.4", "stream": False, "store": True, "input": [_user(SECRET)]},
    )
    a_id = first.json()["id"]
    proxy.drain()
    # The record's 4 h TTL ran out (or a FLUSHALL, or maxmemory eviction): the same state.
    redis_client.delete(f"{settings.REDIS_KEY_PREFIX}affinity:v2:resp:{a_id}")
    before = len(upstream.requests)

    stolen = post_responses(
        proxy,
        key_b,
        {
            "model": "gpt-5.4",
            "stream": False,
            "store": True,
            "previous_response_id": a_id,
            "input": [_user("what was the code?")],
        },
    )

    # Observed at b73145a: 200 — the proxy sent A's id untouched to tok-a (A's account), which
    # continued A's conversation for key B.
    carrying = [sent for sent in upstream.requests[before:] if a_id.encode() in sent.body]
    assert stolen.status_code == 400, stolen.text[:200]
    assert stolen.json()["error"]["code"] == "previous_response_not_found"
    assert carrying == []
