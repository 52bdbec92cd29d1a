"""A key's policy over the admin API (issue 25): GET/PUT/DELETE ``/api/admin/keys/policy``, the
envelope, validation that writes nothing, and the key's use against its limits."""

from __future__ import annotations

import json
import time

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from proxy.models import ClientApiKeyPolicy
from proxy.services.client_api_keys import client_api_key_create
from telemetry.services.ledger import usage_record_create
from tests.proxy.admin_api.conftest import data_of, error_of

URL = "/api/admin/keys/policy"


@pytest.fixture
def key(db):
    return client_api_key_create(name="team", now=timezone.now())


def _put(api, key_id: str, body: dict):
    return api.put(f"{URL}?id={key_id}", data=json.dumps(body), content_type="application/json")


def test_a_key_without_a_policy_reads_as_null(api, key):
    response = api.get(f"{URL}?id={key.id}")

    assert response.status_code == 200
    assert data_of(response) == {"keyId": key.id, "policy": None, "usage": None}


def test_put_replaces_the_policy_and_get_shows_the_use_against_it(api, key):
    usage_record_create(
        created_at=timezone.now(),
        account_id="acc_x",
        model="gpt-5.4",
        message="seeded",
        client_api_key_id=key.id,
        input_tokens=200_000,  # $0.50
        output_tokens=0,
        cached_tokens=0,
        metadata={},
    )
    client = redis.Redis.from_url(settings.REDIS_URL)
    now_ms = int(time.time() * 1000)
    client.zadd(f"{settings.REDIS_KEY_PREFIX}policy:requests:{key.id}", {"a": now_ms, "b": now_ms})

    put = _put(
        api,
        key.id,
        {
            "requestsPerMinute": 60,
            "maxConcurrentRequests": 2,
            "dailyBudgetUsd": "5.25",
            "allowedModels": ["gpt-5.4", " gpt-5.4 ", "fast"],
            "accountGroup": "team-a",
        },
    )
    replaced = _put(api, key.id, {"tokensPerMinute": 1000})
    read = api.get(f"{URL}?id={key.id}")

    assert put.status_code == 200
    policy = data_of(put)["policy"]
    assert {name: policy[name] for name in policy if name != "updatedAt"} == {
        "requestsPerMinute": 60,
        "tokensPerMinute": None,
        "maxConcurrentRequests": 2,
        "dailyBudgetUsd": "5.25",
        "monthlyBudgetUsd": None,
        "allowedModels": ["gpt-5.4", "fast"],
        "accountGroup": "team-a",
    }
    assert data_of(put)["usage"] == {
        "requestsLastMinute": 2,
        "requestsPerMinute": 60,
        "tokensThisMinute": 0,
        "tokensPerMinute": None,
        "inFlight": 0,
        "maxConcurrentRequests": 2,
        "spentTodayUsd": 0.5,
        "dailyBudgetUsd": 5.25,
        "spentThisMonthUsd": 0.5,
        "monthlyBudgetUsd": None,
    }
    # PUT replaces: what the second body left out is unlimited again.
    assert data_of(replaced)["policy"]["requestsPerMinute"] is None
    assert data_of(read)["policy"]["tokensPerMinute"] == 1000
    row = ClientApiKeyPolicy.objects.get(key=key)
    assert (row.tokens_per_minute, row.requests_per_minute, row.allowed_models) == (
        1000,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"requestsPerMinute": 0}, "requestsPerMinute must be between 1 and 1000000000"),
        ({"tokensPerMinute": "10"}, "tokensPerMinute must be a whole number or null"),
        ({"maxConcurrentRequests": True}, "maxConcurrentRequests must be a whole number or null"),
        ({"dailyBudgetUsd": "-1"}, "dailyBudgetUsd must be between 0.0001 and 99999999"),
        ({"monthlyBudgetUsd": "1.00001"}, "monthlyBudgetUsd has more than 4 decimal places"),
        ({"monthlyBudgetUsd": "NaN"}, "monthlyBudgetUsd must be between 0.0001 and 99999999"),
        ({"allowedModels": []}, "allowedModels must be a non-empty list of model names or null"),
        (
            {"allowedModels": [""]},
            "allowedModels entries must be model names of 1 to 200 characters",
        ),
        ({"accountGroup": "a b"}, "accountGroup must be 1 to 64 of A-Z a-z 0-9 _ . - or null"),
        ({"rpm": 1}, "rpm is not a policy field"),
    ],
)
def test_invalid_policies_are_refused_and_write_nothing(api, key, body, message):
    response = _put(api, key.id, body)

    assert error_of(response, 400, 40001) == message
    assert not ClientApiKeyPolicy.objects.filter(key=key).exists()


def test_delete_makes_the_key_unlimited_and_an_unknown_key_is_404(api, key):
    _put(api, key.id, {"requestsPerMinute": 5})

    deleted = api.delete(f"{URL}?id={key.id}")
    missing = api.get(f"{URL}?id=key_nope")

    assert data_of(deleted) == {"keyId": key.id, "policy": None, "usage": None}
    assert not ClientApiKeyPolicy.objects.filter(key=key).exists()
    assert missing.status_code == 404


def test_deleting_the_key_deletes_its_policy(api, key):
    _put(api, key.id, {"requestsPerMinute": 5})

    api.post(
        "/api/admin/keys/delete",
        data=json.dumps({"ids": [key.id]}),
        content_type="application/json",
    )

    assert not ClientApiKeyPolicy.objects.exists()
