"""The model refresh job (spec §4.5) through a real worker, the etag trigger, and plan
allowlists steering the scheduler."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.utils import timezone

from proxy import identity, redis_keys
from proxy.admin_api import pool
from proxy.catalog_cache import forget_cached_catalog
from proxy.runtime_state.model_snapshots import (
    model_snapshots_get_all,
    model_snapshots_replace,
    model_snapshots_update,
)
from proxy.tasks import refresh_models_task
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account
from tests.proxy.test_upstream_identity import BASE_HEADERS

PLUS_MODELS = {
    "models": [
        {
            "slug": "gpt-5.4",
            "display_name": "GPT-5.4",
            "supported_reasoning_levels": [{"effort": "low"}, {"effort": "high"}],
        }
    ]
}
PRO_MODELS = {
    "chat_models": {
        "models": [
            {"slug": "gpt-5.4"},
            {"slug": "gpt-5.5-pro", "title": "GPT-5.5 Pro", "context_window": 400000},
        ]
    }
}


@pytest.fixture(autouse=True)
def clean_snapshots():
    model_snapshots_replace({})
    forget_cached_catalog()
    yield
    model_snapshots_replace({})
    forget_cached_catalog()


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_refresh_fetches_one_account_per_plan_and_replaces_the_hash(upstream, celery_worker):
    make_pool_account("tok-plus-1", plan_type="plus")
    make_pool_account("tok-plus-2", plan_type="plus")
    make_pool_account("tok-pro", plan_type="pro")
    upstream.models_by_token.update(
        {"tok-plus-1": PLUS_MODELS, "tok-plus-2": PLUS_MODELS, "tok-pro": PRO_MODELS}
    )
    model_snapshots_replace({"team": {"models": [{"id": "old"}], "fetchedAt": "earlier"}})
    # The worker process reads CODEX_UPSTREAM_BASE from its environment (the fake's URL).

    result = celery_worker.run(refresh_models_task)

    assert result == {"refreshed": {"plus": 1, "pro": 2}, "kept": [], "removed": ["team"]}
    snapshots = model_snapshots_get_all()
    assert set(snapshots) == {"plus", "pro"}
    plus = snapshots["plus"]["models"][0]
    assert (plus["id"], plus["displayName"], plus["source"]) == ("gpt-5.4", "GPT-5.4", "backend")
    assert [effort["reasoningEffort"] for effort in plus["supportedReasoningEfforts"]] == [
        "low",
        "high",
    ]
    assert snapshots["pro"]["models"][1]["contextWindow"] == 400000
    calls = upstream.server.requests_to("/codex/models")
    asked = sorted(call.header("authorization") for call in calls)
    # one account per plan: whichever plus account the rotation put first
    assert len(asked) == 2 and asked[0] in ("Bearer tok-plus-1", "Bearer tok-plus-2")
    assert asked[1] == "Bearer tok-pro"
    assert calls[0].query["client_version"] == "26.519.81530"
    # The fingerprint's identity, as on the request path (spec §2.2).
    assert calls[0].header("user-agent") == "Codex Desktop/26.519.81530 (darwin; arm64)"
    assert calls[0].header("accept-language") == "en-US,en;q=0.9"
    assert calls[0].header("sec-fetch-mode") == "cors"


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_the_model_list_call_sends_the_auxiliary_headers(upstream, celery_worker):
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # codex_backend_client_models_should_use_original_auxiliary_headers.
    account = make_pool_account("tok-plus", plan_type="plus")
    upstream.models_by_token["tok-plus"] = {"models": [{"slug": "gpt-5.4"}]}

    celery_worker.run(refresh_models_task)

    [sent] = upstream.server.requests_to("/codex/models")
    assert [name.lower() for name, _ in sent.headers] == [
        "host",
        *BASE_HEADERS,
        "accept",
        "x-codex-installation-id",
    ]
    assert sent.header("accept") == "application/json"
    assert sent.header("accept-encoding") == "gzip, deflate"
    assert sent.header("x-codex-installation-id") == identity.installation_id(account.id)
    for absent in ("content-type", "openai-beta", "x-client-request-id", "session-id"):
        assert sent.header(absent) is None


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "failure",
    [
        500,  # the upstream fails
        "<html>Just a moment...</html>",  # not JSON
        None,  # answers, but with no models (spec §4.5: "fail/return nothing")
    ],
)
def test_a_plan_whose_fetch_fails_keeps_its_previous_snapshot(upstream, celery_worker, failure):
    make_pool_account("tok-plus", plan_type="plus")
    if failure is None:
        upstream.models_by_token["tok-plus"] = {"models": []}
    else:
        upstream.models_failures["tok-plus"] = failure
    model_snapshots_replace(
        {"plus": {"models": [{"id": "kept-model", "source": "backend"}], "fetchedAt": "earlier"}}
    )

    result = celery_worker.run(refresh_models_task)

    assert result["kept"] == ["plus"]
    assert model_snapshots_get_all()["plus"]["fetchedAt"] == "earlier"
    calls = upstream.server.requests_to("/codex/models")
    assert [call.header("authorization") for call in calls] == ["Bearer tok-plus"]


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_the_refresh_asks_an_account_that_may_serve(upstream, celery_worker):
    make_pool_account(
        "tok-limited",
        plan_type="plus",
        quota_limit_reached=True,
        quota_cooldown_until=timezone.now() + timedelta(hours=1),
    )
    make_pool_account("tok-ready", plan_type="plus")
    upstream.models_by_token["tok-ready"] = PLUS_MODELS

    result = celery_worker.run(refresh_models_task)

    assert result["refreshed"] == {"plus": 1}
    [call] = upstream.server.requests_to("/codex/models")
    assert call.header("authorization") == "Bearer tok-ready"


def test_plan_allowlists_steer_the_scheduler_and_the_catalog(proxy, upstream, client_key):
    make_pool_account("tok-plus", plan_type="plus")
    make_pool_account("tok-pro", plan_type="pro")
    model_snapshots_replace(
        {
            "plus": {"models": [{"id": "gpt-5.4", "source": "backend"}], "fetchedAt": "now"},
            "pro": {
                "models": [
                    {"id": "gpt-5.4", "source": "backend"},
                    {"id": "gpt-5.5-pro", "source": "backend"},
                ],
                "fetchedAt": "now",
            },
        }
    )
    forget_cached_catalog()
    headers = {"Authorization": f"Bearer {client_key.key}"}

    ids = [
        model["id"]
        for model in requests.get(f"{proxy.url}/v1/models", headers=headers, timeout=10).json()[
            "data"
        ]
    ]
    for _ in range(3):
        response = requests.post(
            f"{proxy.url}/v1/responses",
            data=json.dumps({"model": "gpt-5.5-pro", "stream": False}),
            headers=headers,
            timeout=30,
        )
        assert response.status_code == 200

    assert ids == ["gpt-5.4", "gpt-5.5-pro"]
    assert upstream.tokens_called() == ["tok-pro"] * 3
    missing = requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.5"}),
        headers=headers,
        timeout=30,
    )
    assert missing.status_code == 404  # built-in names are not served once snapshots exist


@pytest.mark.subprocess
def test_a_new_models_etag_queues_a_refresh(
    proxy, upstream, client_key, celery_worker, redis_client
):
    make_pool_account("tok-plus", plan_type="plus")
    upstream.models_by_token["tok-plus"] = PLUS_MODELS
    redis_client.delete(f"{settings.REDIS_KEY_PREFIX}models:etag")
    upstream.program("tok-plus", Reply(headers={"x-models-etag": f"etag-{time.monotonic_ns()}"}))

    response = requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "stream": False}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )
    assert response.headers["x-models-etag"].startswith("etag-")
    proxy.drain()

    deadline = time.monotonic() + 20
    while "plus" not in model_snapshots_get_all() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert model_snapshots_get_all()["plus"]["models"][0]["id"] == "gpt-5.4"


@pytest.mark.django_db(transaction=True)
def test_the_refresh_holds_a_slot_and_skips_a_busy_account(upstream, redis_client):
    from proxy.models import RuntimeSettings
    from proxy.services.model_refresh import models_refresh
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    RuntimeSettings.objects.update(max_concurrent_per_account=1, rotation_strategy="round_robin")
    busy = make_pool_account("tok-busy", plan_type="plus")
    free = make_pool_account("tok-free", plan_type="plus")
    upstream.models_by_token.update({"tok-busy": PLUS_MODELS, "tok-free": PLUS_MODELS})
    busy_slots = redis_keys.account_slots(busy.pk)
    # The slots of this test's two accounts only (an earlier test's accounts may have left theirs).
    slot_keys = [busy_slots, redis_keys.account_slots(free.pk)]
    redis_client.zadd(busy_slots, {"a-request-in-flight": int(time.time() * 1000)})
    seen_slots: list[int] = []
    original = upstream.models_by_token

    class Watching(dict):
        def get(self, key, default=None):
            # while the upstream answers, the chosen account's slot is held
            seen_slots.extend(
                redis_client.zcard(name) for name in slot_keys if redis_client.exists(name)
            )
            return super().get(key, default)

    upstream.models_by_token = Watching(original)
    try:
        report = models_refresh(now=timezone.now())
    finally:
        upstream.models_by_token = original

    assert report.refreshed == {"plus": 1}
    [call] = upstream.server.requests_to("/codex/models")
    assert call.header("authorization") == "Bearer tok-free"
    assert sorted(seen_slots) == [1, 1]  # the busy account's request and the refresh's own slot
    assert redis_client.zcard(busy_slots) == 1  # the in-flight request's slot is untouched
    free_slots = [
        name
        for name in redis_client.scan_iter(f"{settings.REDIS_KEY_PREFIX}scheduler:slots:*")
        if name.decode() != busy_slots and redis_client.zcard(name)
    ]
    assert free_slots == []  # released after the fetch
    from proxy.models import AccountUsage

    assert not AccountUsage.objects.filter(request_count__gt=0).exists()  # nothing counted
    redis_client.delete(busy_slots)


def test_a_snapshot_write_that_meets_another_writer_keeps_both(redis_client):
    model_snapshots_replace({"plus": {"models": [{"id": "a"}], "fetchedAt": "t0"}})
    calls = []

    def add_pro(current):
        calls.append(dict(current))
        if len(calls) == 1:
            # Another process writes between this writer's read and its write.
            redis_client.hset(
                redis_keys.models_plan_snapshots(),
                "team",
                json.dumps({"models": [{"id": "t"}], "fetchedAt": "t1"}),
            )
        return {**current, "pro": {"models": [{"id": "p"}], "fetchedAt": "t2"}}

    written = model_snapshots_update(add_pro)

    assert set(model_snapshots_get_all()) == {"plus", "team", "pro"} == set(written)
    assert len(calls) == 2 and "team" in calls[1]  # started again from what the other wrote


@pytest.mark.django_db(transaction=True)
def test_concurrent_per_account_model_lists_keep_every_plan(upstream):
    # Two operators open the models of accounts of two plans at once; each list is fetched
    # (slowly) and stored as its plan's snapshot. Neither may erase the other's plan.
    upstream.models_by_token = {"tok-edu": PLUS_MODELS, "tok-team": PRO_MODELS}
    upstream.models_delay = 0.3
    model_snapshots_replace({"plus": {"models": [{"id": "gpt-5.4"}], "fetchedAt": "t0"}})
    accounts = [
        pool.UpstreamAccount(
            id=f"acct_{plan}", access_token=f"tok-{plan}", chatgpt_account_id=None, plan_type=plan
        )
        for plan in ("edu", "team")
    ]

    def models_of(account):
        try:
            return pool.account_models(account, now=timezone.now())
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as executor:
        lists = list(executor.map(models_of, accounts))

    assert all(lists)
    assert set(model_snapshots_get_all()) == {"plus", "edu", "team"}
