"""``GET /metrics`` (issue 25 item 6): Prometheus text that prometheus_client's own parser
reads, counters matching the requests made (in one process and added up across two), the
gauges computed at scrape time, and the access rules of METRICS_TOKEN / loopback."""

from __future__ import annotations

import ipaddress
import json
import os

import pytest
import requests
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from proxy.services.key_policies import PolicyValues, key_policy_set
from proxy.services.token_refresh import token_refresh_account
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account, post_responses

BODY = {"model": "gpt-5.4", "input": "hi"}


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of the exposition: (name, sorted labels) → value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _scrape(url: str, **headers) -> str:
    response = requests.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return response.text


def test_the_counters_match_the_requests_made(proxy, upstream, client_key):
    make_pool_account("tok-busy")
    make_pool_account("tok-spare")
    # The first account answers 429: the request moves on to the second (one failover).
    upstream.program("tok-busy", Reply(kind="status", status=429, body={"error": {}}))
    key_policy_set(key=client_key, values=PolicyValues(requests_per_minute=4), now=timezone.now())
    before = _samples(_scrape(proxy.url))

    ok = [post_responses(proxy, client_key, BODY).status_code for _ in range(3)]
    chat = requests.post(
        f"{proxy.url}/v1/chat/completions",
        data=json.dumps({"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )
    refused = post_responses(proxy, client_key, BODY)  # the fifth in a minute
    proxy.drain()
    after = _samples(_scrape(proxy.url))

    assert ok == [200, 200, 200] and chat.status_code == 200
    assert refused.status_code == 429
    key = client_key.id
    assert (
        _value(
            after,
            "cpr_requests_total",
            route="/v1/responses",
            status="200",
            model="gpt-5.4",
            key_id=key,
        )
        == 3
    )
    # Refused by the key's policy from the headers, before the body naming the model was read
    # (issue 35 item 4).
    assert (
        _value(
            after,
            "cpr_requests_total",
            route="/v1/responses",
            status="429",
            model="",
            key_id=key,
        )
        == 1
    )
    assert (
        _value(
            after,
            "cpr_requests_total",
            route="/v1/chat/completions",
            status="200",
            model="gpt-5.4",
            key_id=key,
        )
        == 1
    )

    def grew(name: str, **labels) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("cpr_failovers_total", reason="rate_limited") == 1
    assert grew("cpr_upstream_attempts_total", outcome="rate_limited") == 1
    assert grew("cpr_upstream_attempts_total", outcome="ok") == 4
    assert grew("cpr_request_duration_seconds_count", route="/v1/responses") == 4
    assert grew("cpr_time_to_first_token_seconds_count", route="/v1/responses") == 3
    assert grew("cpr_ledger_batch_entries_sum") == 5
    assert grew("cpr_ledger_lag_seconds_count") == grew("cpr_ledger_batch_entries_count") >= 1
    # The two accounts (one of them now cooling down after its 429), counted at the scrape.
    pool = {
        dict(labels)["status"]: value
        for (name, labels), value in after.items()
        if name == "cpr_pool_accounts"
    }
    assert sum(pool.values()) == 2 and set(pool) == {
        "active",
        "expired",
        "quota_exhausted",
        "disabled",
        "banned",
    }
    assert not any(client_key.key in str(labels) for _, labels in after)


def test_slots_in_use_are_read_at_the_scrape(proxy, upstream, client_key):
    account = make_pool_account("tok-held")
    upstream.program("tok-held", Reply(deltas=30, delta_delay=0.05))

    with requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps(BODY),
        headers={"Authorization": f"Bearer {client_key.key}"},
        stream=True,
        timeout=30,
    ) as held:
        chunks = held.iter_content(chunk_size=None)  # kept: dropping it closes the stream
        next(chunks)
        during = _samples(_scrape(proxy.url))
        b"".join(chunks)
    proxy.drain()
    after = _samples(_scrape(proxy.url))

    assert _value(during, "cpr_scheduler_slots_in_use", account_id=account.id) == 1
    assert _value(after, "cpr_scheduler_slots_in_use", account_id=account.id) == 0


def test_token_refresh_outcomes_are_counted(db):
    from tests.proxy.factories import make_account

    account = make_account(refresh_token=None)
    before = REGISTRY.get_sample_value("cpr_token_refreshes_total", {"result": "not_eligible"})

    result = token_refresh_account(account_id=account.id)

    after = REGISTRY.get_sample_value("cpr_token_refreshes_total", {"result": "not_eligible"})
    assert result == "not_eligible"
    assert (after or 0) - (before or 0) == 1


@pytest.fixture
def metrics_client(db) -> Client:
    return Client()


def test_without_a_token_only_loopback_and_trusted_clients_are_answered(metrics_client, settings):
    settings.METRICS_TOKEN = None
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]

    loopback = metrics_client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    trusted = metrics_client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    outsider = metrics_client.get("/metrics", REMOTE_ADDR="203.0.113.5")
    # Relayed by a trusted reverse proxy for a client outside: still the outsider.
    relayed = metrics_client.get(
        "/metrics", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="203.0.113.5"
    )

    assert (loopback.status_code, trusted.status_code) == (200, 200)
    assert (outsider.status_code, relayed.status_code) == (403, 403)
    assert b"cpr_" not in outsider.content


def test_with_a_token_the_bearer_is_required_from_everyone(metrics_client, settings):
    settings.METRICS_TOKEN = "scrape-secret-1234"

    missing = metrics_client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    wrong = metrics_client.get(
        "/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer scrape-secret-123"
    )
    right = metrics_client.get(
        "/metrics", REMOTE_ADDR="203.0.113.5", HTTP_AUTHORIZATION="Bearer scrape-secret-1234"
    )

    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert right.status_code == 200
    assert b"scrape-secret" not in right.content
    families = {family.name for family in text_string_to_metric_families(right.content.decode())}
    assert {"cpr_pool_accounts", "cpr_scheduler_slots_in_use"} <= families


@pytest.mark.subprocess
def test_two_processes_add_up_in_one_multiprocess_directory(
    upstream, transactional_db, client_key, tmp_path
):
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    make_pool_account("tok-multi")
    processes = [
        UvicornProcess(upstream.url, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) for _ in range(2)
    ]
    try:
        statuses = [
            requests.post(
                f"{processes[index % 3 == 2].url}/v1/responses",
                data=json.dumps(BODY),
                headers={"Authorization": f"Bearer {client_key.key}"},
                timeout=30,
            ).status_code
            for index in range(3)
        ]
        from_first = _samples(_scrape(processes[0].url))
        from_second = _samples(_scrape(processes[1].url))
    finally:
        for process in processes:
            process.stop()

    assert statuses == [200, 200, 200]
    labels = {
        "route": "/v1/responses",
        "status": "200",
        "model": "gpt-5.4",
        "key_id": client_key.id,
    }
    assert _value(from_first, "cpr_requests_total", **labels) == 3
    assert _value(from_second, "cpr_requests_total", **labels) == 3


def test_config_run_empties_the_metrics_directory_once(tmp_path, monkeypatch):
    from config.run import prepare_metrics_directory

    monkeypatch.setenv("CPR_VAR_DIR", str(tmp_path))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv("CPR_METRICS_DIRECTORY_PREPARED", raising=False)
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_123.db").write_bytes(b"stale")

    prepare_metrics_directory("web")
    (directory / "counter_456.db").write_bytes(b"live")  # a worker started meanwhile
    prepare_metrics_directory("web")  # a child of `all`: inherits, does not empty

    assert [path.name for path in directory.iterdir()] == ["counter_456.db"]
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(directory)
