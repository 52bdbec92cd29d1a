"""Per-key policies on /v1 (issue 25 item 1): each limit refuses with its exact 429 envelope and
Retry-After, budgets come from the key's priced usage rows, allowed models and the account
group narrow what the key may use, and a flushed Redis only starts the counters afresh."""

from __future__ import annotations

import json
import math
import time
from datetime import timedelta
from decimal import Decimal

import redis
import requests
from django.conf import settings
from django.utils import timezone

from proxy.domain.key_policy import month_start, next_day_start, next_month_start
from proxy.models import RuntimeSettings
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.models import OpsErrorLog
from telemetry.services.ledger import usage_record_create
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses


def _policy(key, **limits):
    return key_policy_set(key=key, values=PolicyValues(**limits), now=timezone.now())


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _key(name: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}{name}"


def _error(code: str, message: str, error_type: str = "rate_limit_error") -> dict:
    return {"error": {"message": message, "type": error_type, "code": code}}


def _tokens_usage(input_tokens: int, output_tokens: int) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


BODY = {"model": "gpt-5.4", "input": "hi"}


def test_a_key_without_a_policy_leaves_no_policy_counters(proxy, upstream, client_key):
    make_pool_account("tok-free")

    assert post_responses(proxy, client_key, BODY).status_code == 200
    proxy.drain()

    assert _redis().keys(_key(f"policy:*{client_key.id}*")) == []


def test_requests_per_minute_refuses_the_third_request_with_an_exact_retry_after(
    proxy, upstream, client_key
):
    make_pool_account("tok-rpm")
    _policy(client_key, requests_per_minute=2)
    admissions = _key(f"policy:requests:{client_key.id}")

    first = post_responses(proxy, client_key, BODY)
    second = post_responses(proxy, client_key, BODY)
    proxy.drain()
    # The window slides: move both admissions 44.1 s into the past, so the oldest leaves it
    # in 15.9 s — a refusal now must say 16.
    moved_to = int(time.time() * 1000) - 44_100
    client = _redis()
    client.zadd(admissions, {member: moved_to for member in client.zrange(admissions, 0, -1)})
    third = post_responses(proxy, client_key, BODY)
    proxy.drain()

    assert (first.status_code, second.status_code) == (200, 200)
    assert third.status_code == 429
    assert third.json() == _error(
        "key_rate_limited", "This API key is over its requests-per-minute limit"
    )
    assert third.headers["Retry-After"] == "16"
    assert len(upstream.responses_requests()) == 2  # the refused request cost no upstream call
    assert client.zcard(admissions) == 2  # and was not counted
    [row] = OpsErrorLog.objects.filter(client_api_key_id=client_key.id)
    assert (row.status_code, row.failure_class) == (429, "key_rate_limited")


def test_tokens_per_minute_counts_the_usage_of_finished_requests(proxy, upstream, client_key):
    make_pool_account("tok-tpm")
    _policy(client_key, tokens_per_minute=100)
    upstream.program("tok-tpm", Reply(usage=_tokens_usage(100, 50)))
    if 60 - time.time() % 60 < 5:  # both requests must fall in one fixed window
        time.sleep(60 - time.time() % 60)

    first = post_responses(proxy, client_key, BODY)
    proxy.drain()
    before = time.time()
    second = post_responses(proxy, client_key, BODY)
    after = time.time()

    assert first.status_code == 200
    window_start = int(before) - int(before) % 60
    assert int(_redis().get(_key(f"policy:tokens:{client_key.id}:{window_start}"))) == 150
    assert second.status_code == 429
    assert second.json() == _error(
        "key_tokens_limited", "This API key is over its tokens-per-minute limit"
    )
    window_end = window_start + 60
    assert int(second.headers["Retry-After"]) in {
        math.ceil(window_end - after),
        math.ceil(window_end - before),
    }
    assert len(upstream.responses_requests()) == 1


def test_concurrency_is_freed_when_a_stream_ends_and_when_its_client_leaves(
    proxy, upstream, client_key
):
    make_pool_account("tok-conc")
    _policy(client_key, max_concurrent_requests=1)
    upstream.program("tok-conc", Reply(deltas=40, delta_delay=0.05), Reply(), Reply())
    in_flight = _key(f"policy:in_flight:{client_key.id}")

    with requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps(BODY),
        headers={"Authorization": f"Bearer {client_key.key}"},
        stream=True,
        timeout=30,
    ) as holder:
        chunks = holder.iter_content(chunk_size=None)  # kept: dropping it closes the stream
        next(chunks)  # committed: the slot is held
        refused = post_responses(proxy, client_key, BODY)
    # The client left half-way: its slot goes with it.
    proxy.drain()
    deadline = time.monotonic() + 10
    while _redis().zcard(in_flight) and time.monotonic() < deadline:
        time.sleep(0.05)
        proxy.drain()
    after_leaving = post_responses(proxy, client_key, BODY)
    proxy.drain()
    after_ending = post_responses(proxy, client_key, BODY)
    proxy.drain()

    assert refused.status_code == 429
    assert refused.json() == _error(
        "key_concurrency_limited",
        "This API key has as many requests in flight as its policy allows",
    )
    assert refused.headers["Retry-After"] == "1"
    assert (after_leaving.status_code, after_ending.status_code) == (200, 200)
    assert _redis().zcard(in_flight) == 0


def _seed_usage(key, *, at, input_tokens: int, model: str = "gpt-5.4") -> None:
    """Usage rows of ``key`` at ``at``: ``input_tokens`` in requests of 200k (under the
    272k long-context line, so gpt-5.4 costs its standard $2.50 per million)."""
    for _ in range(input_tokens // 200_000):
        usage_record_create(
            created_at=at,
            account_id="acc_seeded",
            model=model,
            message="seeded",
            client_api_key_id=key.id,
            input_tokens=200_000,
            output_tokens=0,
            cached_tokens=0,
            metadata={},
        )


def test_a_daily_budget_spent_by_earlier_usage_refuses_until_midnight(proxy, upstream, client_key):
    make_pool_account("tok-budget")
    # 1M input tokens of gpt-5.4 at $2.50 per million: $2.50 spent today.
    _seed_usage(client_key, at=timezone.now() - timedelta(seconds=1), input_tokens=1_000_000)
    _policy(client_key, daily_budget_usd=Decimal("2.5"))

    before = timezone.now()
    refused = post_responses(proxy, client_key, BODY)
    after = timezone.now()

    assert refused.status_code == 429
    assert refused.json() == _error(
        "key_budget_exceeded",
        "This API key has reached its daily budget (resets at 00:00 UTC)",
        "insufficient_quota",
    )
    midnight = next_day_start(before)
    assert int(refused.headers["Retry-After"]) in {
        math.ceil((midnight - after).total_seconds()),
        math.ceil((midnight - before).total_seconds()),
    }
    assert upstream.responses_requests() == []


def test_a_budget_with_room_admits_and_each_finished_request_adds_its_cost(
    proxy, upstream, client_key
):
    make_pool_account("tok-room")
    _seed_usage(client_key, at=timezone.now() - timedelta(seconds=1), input_tokens=600_000)
    _policy(client_key, daily_budget_usd=Decimal("2.5"))  # $1.50 of it spent
    # Each answer: 200k input tokens of gpt-5.4 = $0.50.
    upstream.program("tok-room", *[Reply(usage=_tokens_usage(200_000, 0)) for _ in range(3)])
    statuses = []
    for _ in range(3):
        statuses.append(post_responses(proxy, client_key, BODY).status_code)
        proxy.drain()

    # $1.50, $2.00, then $2.50 reached: the third is refused.
    assert statuses == [200, 200, 429]
    day = timezone.now().strftime("%Y-%m-%d")
    assert int(_redis().get(_key(f"policy:spend:{client_key.id}:day:{day}"))) == 2_500_000


def test_a_monthly_budget_counts_the_whole_month(proxy, upstream, client_key):
    make_pool_account("tok-month")
    # At the month's first second: this month, and not today unless today is the 1st.
    _seed_usage(client_key, at=month_start(timezone.now()), input_tokens=4_000_000)  # $10
    _policy(client_key, monthly_budget_usd=Decimal("10"), daily_budget_usd=Decimal("500"))

    before = timezone.now()
    refused = post_responses(proxy, client_key, BODY)

    assert refused.status_code == 429
    assert refused.json() == _error(
        "key_budget_exceeded",
        "This API key has reached its monthly budget (resets on the 1st, 00:00 UTC)",
        "insufficient_quota",
    )
    remaining = (next_month_start(before) - before).total_seconds()
    assert abs(int(refused.headers["Retry-After"]) - remaining) <= 2


def test_allowed_models_are_compared_after_alias_resolution(proxy, upstream, client_key):
    make_pool_account("tok-models")
    RuntimeSettings.objects.update(model_aliases_json={"quick": "gpt-5.4-mini"})
    _policy(client_key, allowed_models=["quick"])

    by_alias = post_responses(proxy, client_key, {"model": "quick", "input": "hi"})
    by_name = post_responses(proxy, client_key, {"model": "gpt-5.4-mini", "input": "hi"})
    other = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": "hi"})
    unknown = post_responses(proxy, client_key, {"model": "no-such-model", "input": "hi"})

    assert (by_alias.status_code, by_name.status_code) == (200, 200)
    assert other.status_code == 403
    assert other.json() == _error(
        "model_not_allowed",
        "This API key is not allowed to use this model",
        "invalid_request_error",
    )
    assert unknown.status_code == 404  # unknown to everyone: still model_not_found
    assert [request.json()["model"] for request in upstream.responses_requests()] == [
        "gpt-5.4-mini",
        "gpt-5.4-mini",
    ]


def test_an_account_group_limits_the_candidates(proxy, upstream, client_key):
    make_pool_account("tok-team", label="Alice's Pro, group:team-a")
    make_pool_account("tok-other", label="group:team-b")
    make_pool_account("tok-plain")
    _policy(client_key, account_group="team-a")

    statuses = [post_responses(proxy, client_key, BODY).status_code for _ in range(4)]
    _policy(client_key, account_group="nobody")
    empty = post_responses(proxy, client_key, {**BODY, "stream": False})

    assert statuses == [200] * 4
    assert set(upstream.tokens_called()) == {"tok-team"}
    assert empty.status_code == 503
    assert empty.json()["error"]["code"] == "no_available_accounts"


def test_a_flushed_redis_starts_the_counters_afresh(private_proxy, private_redis, client_key):
    make_pool_account("tok-flush")
    _policy(
        client_key,
        requests_per_minute=1,
        max_concurrent_requests=1,
        daily_budget_usd=Decimal("100"),
    )

    first = post_responses(private_proxy, client_key, BODY)
    second = post_responses(private_proxy, client_key, BODY)
    private_proxy.drain()
    redis.Redis.from_url(private_redis.url).flushall()
    third = post_responses(private_proxy, client_key, BODY)
    private_proxy.drain()

    assert [first.status_code, second.status_code, third.status_code] == [200, 429, 200]
    assert (
        redis.Redis.from_url(private_redis.url).zcard(_key(f"policy:in_flight:{client_key.id}"))
        == 0
    )


def test_the_models_routes_show_only_the_allowed_models(proxy, upstream, client_key):
    RuntimeSettings.objects.update(model_aliases_json={"quick": "gpt-5.4-mini"})
    _policy(client_key, allowed_models=["gpt-5.4-mini"])
    headers = {"Authorization": f"Bearer {client_key.key}"}

    listed = requests.get(f"{proxy.url}/v1/models", headers=headers, timeout=10).json()
    catalog = requests.get(f"{proxy.url}/v1/models/catalog", headers=headers, timeout=10).json()
    hidden = requests.get(f"{proxy.url}/v1/models/gpt-5.4", headers=headers, timeout=10)
    shown = requests.get(f"{proxy.url}/v1/models/quick", headers=headers, timeout=10)

    assert [model["id"] for model in listed["data"]] == ["gpt-5.4-mini", "quick"]
    assert [entry["id"] for entry in catalog] == ["gpt-5.4-mini"]
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"
    assert shown.status_code == 200


def test_a_failed_request_gives_its_concurrency_slot_back(proxy, upstream, client_key):
    make_pool_account("tok-elsewhere")
    # Admitted, then no account of the group: 503, and the slot is free for the next one.
    _policy(client_key, max_concurrent_requests=1, account_group="empty")

    statuses = []
    for _ in range(3):
        statuses.append(post_responses(proxy, client_key, {**BODY, "stream": False}).status_code)
        proxy.drain()

    assert statuses == [503, 503, 503]
    assert _redis().zcard(_key(f"policy:in_flight:{client_key.id}")) == 0
