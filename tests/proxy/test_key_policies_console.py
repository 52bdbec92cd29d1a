"""A key's policy in the Django console (issue 25): an inline on the key's page, written
through the services with the admin API's checks, showing the key's use against it."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone

from proxy.models import ClientApiKeyPolicy
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set


@pytest.fixture
def operator(client, db):
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


def _form(key, **policy) -> dict:
    fields = {
        "name": key.name,
        "label": "",
        "enabled": "on",
        "policy-TOTAL_FORMS": "1",
        "policy-INITIAL_FORMS": "1" if ClientApiKeyPolicy.objects.filter(key=key).exists() else "0",
        "policy-MIN_NUM_FORMS": "0",
        "policy-MAX_NUM_FORMS": "1",
        "policy-0-key": key.pk,
    }
    fields.update({f"policy-0-{name}": value for name, value in policy.items()})
    return fields


def _change_url(key) -> str:
    return f"/admin/proxy/clientapikey/{quote(key.pk)}/change/"


def test_an_operator_sets_a_policy_on_the_keys_page(operator):
    key = client_api_key_create(name="team", now=timezone.now())

    response = operator.post(
        _change_url(key),
        _form(
            key,
            requests_per_minute="30",
            daily_budget_usd="2.5",
            allowed_models="gpt-5.4\ngpt-5.4-mini, gpt-5.4",
            account_group="team-a",
        ),
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    policy = ClientApiKeyPolicy.objects.get(key=key)
    assert policy.requests_per_minute == 30
    assert policy.daily_budget_usd == Decimal("2.5")
    assert policy.allowed_models == ["gpt-5.4", "gpt-5.4-mini"]
    assert policy.account_group == "team-a"
    assert policy.tokens_per_minute is None


def test_the_page_shows_the_use_against_the_limits(operator):
    key = client_api_key_create(name="team", now=timezone.now())
    key_policy_set(key=key, values=PolicyValues(requests_per_minute=30), now=timezone.now())

    page = operator.get(_change_url(key)).content.decode()

    assert "requests in the last minute: <b>0</b> of 30" in page
    assert "spent today (USD): <b>0.0</b> of unlimited" in page


def test_an_invalid_group_is_refused_on_the_page_and_nothing_is_written(operator):
    key = client_api_key_create(name="team", now=timezone.now())

    response = operator.post(_change_url(key), _form(key, account_group="two words"))

    assert response.status_code == 200
    assert "must be 1 to 64 of A-Z a-z 0-9 _ . - or null" in response.content.decode()
    assert not ClientApiKeyPolicy.objects.exists()


def test_deleting_the_inline_removes_the_policy(operator):
    key = client_api_key_create(name="team", now=timezone.now())
    key_policy_set(key=key, values=PolicyValues(requests_per_minute=30), now=timezone.now())

    response = operator.post(_change_url(key), _form(key, requests_per_minute="30", DELETE="on"))

    assert response.status_code == 302
    assert not ClientApiKeyPolicy.objects.exists()
