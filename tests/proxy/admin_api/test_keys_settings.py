"""Client keys and runtime settings over the admin API (spec §6.4, §6.5); a settings change is
seen by the next /v1 request."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.utils import timezone

from proxy.models import ClientApiKey, RuntimeSettings
from proxy.services.client_api_keys import client_api_key_create
from tests.proxy.admin_api.conftest import data_of, error_of


def test_create_list_update_delete_keys(api):
    created = data_of(api.post_json("/api/admin/keys", {"name": "laptop"}))

    key = ClientApiKey.objects.get()
    assert created["key"] == key.key and key.key.startswith("sk_")
    assert created["prefix"] == key.key[:12] and created["enabled"] is True
    listed = data_of(api.get("/api/admin/keys?page=1&pageSize=20"))
    assert [item["id"] for item in listed["items"]] == [key.pk]
    assert listed["items"][0]["key"] == key.key  # the full key, for the authenticated admin
    assert listed["page"]["total"] == 1
    updated = data_of(
        api.post_json(
            "/api/admin/keys/update", {"id": key.pk, "label": "work", "status": "disabled"}
        )
    )
    assert (updated["label"], updated["enabled"]) == ("work", False)
    key.refresh_from_db()
    assert key.enabled is False
    assert data_of(api.post_json("/api/admin/keys/delete", {"ids": [key.pk, "key_x"]})) == {
        "deleted": 1,
        "notFound": ["key_x"],
    }
    assert ClientApiKey.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/api/admin/keys", {}, "name: This field is required."),
        ("/api/admin/keys", {"name": "   "}, "name: This field may not be blank."),
        ("/api/admin/keys", {"name": "x", "key": "sk_mine"}, "key is not a field of this request"),
        ("/api/admin/keys/update", {"id": "k", "name": "n"}, "name is not editable"),
        (
            "/api/admin/keys/update",
            {"id": "k", "status": "on"},
            'status: "on" is not a valid choice.',
        ),
    ],
)
def test_key_validation(api, path, body, message):
    assert error_of(api.post_json(path, body), 400, 40001) == message
    assert ClientApiKey.objects.count() == 0


def test_key_search(api):
    client_api_key_create(name="alpha", now=timezone.now())
    client_api_key_create(name="beta", label="ci", now=timezone.now())

    names = [item["name"] for item in data_of(api.get("/api/admin/keys?search=CI"))["items"]]

    assert names == ["beta"]


def test_the_config_snippet_and_cc_switch_link(api):
    key = client_api_key_create(name="desk", now=timezone.now())

    config = data_of(api.get(f"/api/admin/keys/config?id={key.pk}"))

    assert config["baseUrl"] == "http://testserver/v1"
    assert 'base_url = "http://testserver/v1"' in config["configToml"]
    assert 'wire_api = "responses"' in config["configToml"]
    assert json.loads(config["authJson"]) == {"OPENAI_API_KEY": key.key}
    link = urlsplit(config["ccSwitchUrl"])
    assert (link.scheme, link.netloc, link.path) == ("ccswitch", "v1", "/import")
    query = {name: values[0] for name, values in parse_qs(link.query).items()}
    assert query == {
        "resource": "provider",
        "app": "codex",
        "model": "gpt-5.5",
        "name": "desk",
        "homepage": "http://testserver/v1",
        "endpoint": "http://testserver/v1",
        "apiKey": key.key,
        "configFormat": "json",
        "usageEnabled": "false",
    }
    assert error_of(api.get("/api/admin/keys/config?id=nope"), 404, 40401)


def test_settings_get_and_partial_post(api):
    initial = data_of(api.get("/api/admin/settings"))
    assert initial == {
        "modelAliases": {},
        "refreshMarginSeconds": 3600,
        "refreshConcurrency": 2,
        "maxConcurrentPerAccount": 3,
        "requestIntervalMs": 50,
        "rotationStrategy": "smart",
    }

    changed = data_of(
        api.post_json(
            "/api/admin/settings", {"rotationStrategy": "round_robin", "requestIntervalMs": 0}
        )
    )

    assert changed == {**initial, "rotationStrategy": "round_robin", "requestIntervalMs": 0}
    row = RuntimeSettings.objects.get()
    assert (row.rotation_strategy, row.request_interval_ms, row.max_concurrent_per_account) == (
        "round_robin",
        0,
        3,
    )


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({"usageRetentionDays": 5}, 40001, "Unsupported settings field: usageRetentionDays"),
        (
            {"maxConcurrentPerAccount": 0},
            40001,
            "maxConcurrentPerAccount: Ensure this value is greater than or equal to 1.",
        ),
        (
            {"requestIntervalMs": -1},
            40001,
            "requestIntervalMs: Ensure this value is greater than or equal to 0.",
        ),
        (
            {"rotationStrategy": "random"},
            40001,
            'rotationStrategy: "random" is not a valid choice.',
        ),
        ({"modelAliases": {"a": ""}}, 40001, "modelAliases.a: This field may not be blank."),
        # Spec §1.6 "alias ≠ target enforced on write" (trimmed first).
        (
            {"modelAliases": {"fast": "gpt-5.4-mini", "gpt-5.4": " gpt-5.4 "}},
            40001,
            "modelAliases: the alias 'gpt-5.4' cannot be its own target",
        ),
        (
            {"refreshMarginSeconds": "soon"},
            40001,
            "refreshMarginSeconds: A valid integer is required.",
        ),
    ],
)
def test_settings_validation_writes_nothing(api, body, code, message):
    before = data_of(api.get("/api/admin/settings"))

    assert error_of(api.post_json("/api/admin/settings", body), 400, code) == message
    assert data_of(api.get("/api/admin/settings")) == before


def test_settings_malformed_json(api):
    response = api.post("/api/admin/settings", data="{,", content_type="application/json")

    assert error_of(response, 400, 40000) == "Malformed JSON body"


@pytest.mark.django_db(transaction=True)
def test_an_alias_set_over_the_api_is_used_by_the_next_v1_request(proxy, client_key, api):
    before = requests.get(
        f"{proxy.url}/v1/models", headers={"Authorization": f"Bearer {client_key.key}"}, timeout=10
    ).json()
    assert "my-fast" not in {model["id"] for model in before["data"]}

    data_of(api.post_json("/api/admin/settings", {"modelAliases": {"my-fast": "gpt-5.4-mini"}}))

    after = requests.get(
        f"{proxy.url}/v1/models", headers={"Authorization": f"Bearer {client_key.key}"}, timeout=10
    ).json()
    assert "my-fast" in {model["id"] for model in after["data"]}
