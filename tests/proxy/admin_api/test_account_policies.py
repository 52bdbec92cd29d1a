"""An account's daily burn cap over the admin API (issue 25 item 5): GET/PUT/DELETE
``/api/admin/accounts/policy``, validation that writes nothing, and the cap visible in the
account views (the burn, the eligibility verdict) and the quota runway."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.admin_api.display import china_iso, china_time
from proxy.domain.key_policy import next_day_start
from proxy.models import AccountPolicy
from telemetry.services.ledger import usage_record_create
from tests.proxy.admin_api.conftest import data_of, error_of
from tests.proxy.factories import make_account

URL = "/api/admin/accounts/policy"
OUT_OF_RANGE = "dailyBurnCapTokens must be between 1 and 1000000000000"
UNCAPPED = {
    "dailyBurnCapTokens": None,
    "burnedTodayTokens": 0,
    "overCap": False,
    "resumesAt": None,
}


@pytest.fixture
def account(db):
    return make_account(access_token_expires_at=timezone.now() + timedelta(days=1))


def _put(api, account_id: str, body: dict):
    return api.put(f"{URL}?id={account_id}", data=json.dumps(body), content_type="application/json")


def _spent_today(account, tokens: int) -> None:
    usage_record_create(
        created_at=timezone.now(),
        account_id=account.pk,
        model="gpt-5.4",
        message="v1 responses completed",
        input_tokens=tokens,
        output_tokens=0,
    )


def test_an_account_without_a_policy_reads_as_uncapped(api, account):
    response = api.get(f"{URL}?id={account.pk}")

    assert data_of(response) == {"accountId": account.pk, "policy": None, "dailyBurn": UNCAPPED}


def test_put_sets_the_cap_and_the_account_views_show_it_held_back(api, account):
    _spent_today(account, 2500)

    put = _put(api, account.pk, {"dailyBurnCapTokens": 2000})
    detail = data_of(api.get(f"/api/admin/accounts/detail?id={account.pk}"))
    listed = data_of(api.get("/api/admin/accounts"))["items"][0]
    midnight = next_day_start(timezone.now())

    row = AccountPolicy.objects.get(pk=account.pk)
    capped = {
        "dailyBurnCapTokens": 2000,
        "burnedTodayTokens": 2500,
        "overCap": True,
        "resumesAt": china_iso(midnight),
    }
    assert data_of(put) == {
        "accountId": account.pk,
        "policy": {"dailyBurnCapTokens": 2000, "updatedAt": row.updated_at.isoformat()},
        "dailyBurn": capped,
    }
    assert detail["dailyBurn"] == listed["dailyBurn"] == capped
    eligibility = detail["eligibility"]
    assert (eligibility["eligible"], eligibility["verdict"], eligibility["summary"]) == (
        False,
        "daily_burn_capped",
        "Held back: its daily burn cap is reached (until 00:00 UTC)",
    )
    assert eligibility["until"] == china_iso(midnight)
    [failing] = [check for check in eligibility["checks"] if not check["passed"]]
    assert failing == {
        "name": "dailyBurnCap",
        "passed": False,
        "detail": "2500 of its 2000 tokens burned today (UTC)",
        "until": china_iso(midnight),
        "untilDisplay": china_time(midnight),
    }


def test_under_its_cap_the_account_stays_eligible(api, account):
    _spent_today(account, 500)
    _put(api, account.pk, {"dailyBurnCapTokens": 2000})

    detail = data_of(api.get(f"/api/admin/accounts/detail?id={account.pk}"))

    assert detail["dailyBurn"] == {
        "dailyBurnCapTokens": 2000,
        "burnedTodayTokens": 500,
        "overCap": False,
        "resumesAt": None,
    }
    assert detail["eligibility"]["verdict"] == "eligible"
    check = next(c for c in detail["eligibility"]["checks"] if c["name"] == "dailyBurnCap")
    assert (check["passed"], check["detail"]) == (True, "500 of its 2000 tokens burned today (UTC)")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"dailyBurnCapTokens": 0}, OUT_OF_RANGE),
        ({"dailyBurnCapTokens": 10**12 + 1}, OUT_OF_RANGE),
        ({"dailyBurnCapTokens": "100"}, "dailyBurnCapTokens must be a whole number or null"),
        ({"dailyBurnCapTokens": 1.5}, "dailyBurnCapTokens must be a whole number or null"),
        ({"dailyBurnCapTokens": True}, "dailyBurnCapTokens must be a whole number or null"),
        ({"dailyBurnCap": 100}, "dailyBurnCap is not a policy field"),
    ],
)
def test_invalid_caps_are_refused_and_write_nothing(api, account, body, message):
    response = _put(api, account.pk, body)

    assert error_of(response, 400, 40001) == message
    assert not AccountPolicy.objects.exists()


def test_null_or_delete_removes_the_cap_and_an_unknown_account_is_404(api, account):
    _put(api, account.pk, {"dailyBurnCapTokens": 5})
    cleared = _put(api, account.pk, {"dailyBurnCapTokens": None})
    _put(api, account.pk, {"dailyBurnCapTokens": 5})
    deleted = api.delete(f"{URL}?id={account.pk}")
    missing = api.get(f"{URL}?id=acct_nope")

    expected = {"accountId": account.pk, "policy": None, "dailyBurn": UNCAPPED}
    assert data_of(cleared) == data_of(deleted) == expected
    assert not AccountPolicy.objects.exists()
    assert error_of(missing, 404, 40401) == "Account not found"
