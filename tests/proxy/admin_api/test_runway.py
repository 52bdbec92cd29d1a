"""Quota runway (issue 25 item 5): per account and for the pool, when the 5-hour and weekly
windows run out at the last hour's burn rate — from real buckets (written by the ledger's own
function) and the stored quota snapshots, checked against the figures worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from proxy.admin_api.display import china_iso
from proxy.admin_api.runway import quota_runway
from proxy.domain.key_policy import next_day_start
from proxy.models import Account, AccountPolicy
from proxy.services.account_policies import account_policy_set
from telemetry.services.ledger import usage_record_create
from tests.proxy.admin_api.conftest import data_of
from tests.proxy.factories import make_account

pytestmark = pytest.mark.django_db

# Seven minutes into a bucket: the burn rate is measured over 09:00–10:07, 67 minutes.
NOW = datetime(2026, 11, 30, 10, 7, tzinfo=UTC)
RECENT_HOURS = 67 / 60


def _window(used: float, minutes: int, resets_in: timedelta, **extra) -> dict:
    return {
        "used_percent": used,
        "window_minutes": minutes,
        "reset_at": int((NOW + resets_in).timestamp()),
        **extra,
    }


def _account(id: str, *, primary=None, secondary=None, status="active"):
    snapshot = {"source": "core"}
    if primary:
        snapshot["primary"] = primary
    if secondary:
        snapshot["secondary"] = secondary
    return make_account(id=id, status=status, quota_json={"snapshots": [snapshot]}, now=NOW)


def _spend(account_id: str, at: datetime, tokens: int) -> None:
    usage_record_create(
        created_at=at,
        account_id=account_id,
        model="gpt-5.4",
        message="v1 responses completed",
        input_tokens=tokens // 2,
        output_tokens=tokens - tokens // 2,
    )


@pytest.fixture
def pool():
    """A: 60 % of its 5 h window (started 08:07) and 10 % of its week used; the proxy sent it
    3,000 tokens at 08:30, 6,000 at 09:30 and 20,000 two days ago. B: its 5 h window is used up;
    nothing sent. C: nothing used by the upstream's count, 1,000 tokens at 09:45. D: disabled."""
    _account(
        "acct_a",
        primary=_window(60, 300, timedelta(hours=3)),
        secondary=_window(10, 10080, timedelta(days=3)),
    )
    _account(
        "acct_b",
        primary=_window(100, 300, timedelta(minutes=40), limit_reached=True),
        secondary=_window(50, 10080, timedelta(days=5)),
        status="quota_exhausted",
    )
    _account("acct_c", primary=_window(0, 300, timedelta(hours=4)))
    _account("acct_d", primary=_window(10, 300, timedelta(hours=1)), status="disabled")
    _spend("acct_a", datetime(2026, 11, 30, 8, 30, tzinfo=UTC), 3000)
    _spend("acct_a", datetime(2026, 11, 30, 9, 30, tzinfo=UTC), 6000)
    _spend("acct_a", NOW - timedelta(days=2), 20000)
    _spend("acct_c", datetime(2026, 11, 30, 9, 45, tzinfo=UTC), 1000)
    _spend("acct_d", datetime(2026, 11, 30, 9, 45, tzinfo=UTC), 50000)


def _close(reported: str | None, expected: datetime) -> bool:
    return reported is not None and abs(datetime.fromisoformat(reported) - expected) <= timedelta(
        seconds=1
    )


def test_each_accounts_windows_are_forecast_from_its_own_burn(pool):
    runway = quota_runway(now=NOW)

    by_id = {item["id"]: item for item in runway["accounts"]}
    assert sorted(by_id) == ["acct_a", "acct_b", "acct_c"]  # disabled accounts do not serve
    a_burn = 6000 / RECENT_HOURS
    assert by_id["acct_a"]["burnTokensPerHour"] == round(a_burn, 1)
    five_hour, weekly = by_id["acct_a"]["windows"]
    # 5 h: 9,000 tokens made 60 %; 40 % left = 6,000 tokens, at a_burn per hour.
    assert (five_hour["key"], five_hour["tokensInWindow"]) == ("codex-five-hour", 9000)
    assert five_hour["outlook"] == "exhausts"
    assert _close(five_hour["exhaustsAt"], NOW + timedelta(hours=6000 / a_burn))
    assert five_hour["burnPercentPerHour"] == round(60 / 9000 * a_burn, 3)
    # Weekly: 29,000 tokens made 10 %; 90 % left = 261,000 tokens, before the reset in 3 days.
    assert (weekly["key"], weekly["tokensInWindow"]) == ("codex-weekly", 29000)
    assert weekly["outlook"] == "exhausts"
    assert _close(weekly["exhaustsAt"], NOW + timedelta(hours=261000 / a_burn))

    b_five_hour, b_weekly = by_id["acct_b"]["windows"]
    assert b_five_hour["outlook"] == "exhausted"
    assert b_five_hour["exhaustsAt"] == china_iso(NOW + timedelta(minutes=40))  # back then
    assert b_weekly["outlook"] == "idle"  # nothing sent through it lately
    [c_five_hour] = by_id["acct_c"]["windows"]
    assert c_five_hour["outlook"] == "unknown"  # burning, but what a percent costs is unknown


def test_a_window_that_resets_before_it_runs_out_says_so(pool):
    _account(
        "acct_e",
        primary=_window(30, 300, timedelta(minutes=30)),
    )
    _spend("acct_e", datetime(2026, 11, 30, 9, 10, tzinfo=UTC), 3000)

    by_id = {item["id"]: item for item in quota_runway(now=NOW)["accounts"]}
    [five_hour] = by_id["acct_e"]["windows"]
    # 70 % left = 7,000 tokens at 3,000 / 67 min: about 2.6 h, after the reset in 30 min.
    assert (five_hour["outlook"], five_hour["exhaustsAt"]) == ("resets_first", None)


def test_the_pools_runway_is_its_known_room_over_its_whole_burn(pool):
    runway = quota_runway(now=NOW)

    pool_burn = (6000 + 1000) / RECENT_HOURS
    assert runway["poolBurnTokensPerHour"] == round(pool_burn, 1)
    five_hour = runway["pool"]["five-hour"]
    # A has 6,000 tokens of room, B none (used up, known), C's room is unknown (left out).
    assert (five_hour["roomTokens"], five_hour["accountsForecast"]) == (6000, 2)
    assert five_hour["outlook"] == "exhausts"
    assert _close(five_hour["exhaustsAt"], NOW + timedelta(hours=6000 / pool_burn))
    weekly = runway["pool"]["weekly"]
    assert (weekly["roomTokens"], weekly["accountsForecast"]) == (261000, 1)
    assert _close(weekly["exhaustsAt"], NOW + timedelta(hours=261000 / pool_burn))


def test_an_idle_pool_and_an_empty_one(db):
    assert quota_runway(now=NOW)["pool"]["five-hour"]["outlook"] == "unknown"
    _account("acct_idle", primary=_window(100, 300, timedelta(hours=1), limit_reached=True))

    assert quota_runway(now=NOW)["pool"]["five-hour"]["outlook"] == "exhausted"


def test_the_admin_api_and_the_dashboard_summary_carry_it(api, anonymous, pool):
    runway = data_of(api.get("/api/admin/dashboard/runway"))
    summary = data_of(api.get("/api/admin/dashboard/summary"))

    assert {item["id"] for item in runway["accounts"]} == {"acct_a", "acct_b", "acct_c"}
    assert set(summary["quotaRunway"]["pool"]) == {"five-hour", "weekly"}
    assert anonymous.get("/api/admin/dashboard/runway").status_code == 401


def test_a_daily_burn_cap_shows_and_a_capped_accounts_room_is_left_out(pool):
    # acct_a burned 3,000 + 6,000 tokens today (before NOW); acct_b is used up (room 0).
    account_policy_set(
        account=Account.objects.get(pk="acct_a"),
        daily_burn_cap_tokens=20000,
        now=NOW,
    )
    under = quota_runway(now=NOW)
    AccountPolicy.objects.filter(pk="acct_a").update(daily_burn_cap_tokens=5000)
    over = quota_runway(now=NOW)

    def account_a(runway):
        return next(item for item in runway["accounts"] if item["id"] == "acct_a")

    assert account_a(under)["dailyBurn"] == {
        "dailyBurnCapTokens": 20000,
        "burnedTodayTokens": 9000,
        "overCap": False,
        "resumesAt": None,
    }
    five_hour = under["pool"]["five-hour"]
    assert (five_hour["roomTokens"], five_hour["accountsForecast"]) == (6000, 2)
    assert account_a(over)["dailyBurn"] == {
        "dailyBurnCapTokens": 5000,
        "burnedTodayTokens": 9000,
        "overCap": True,
        "resumesAt": china_iso(next_day_start(NOW)),
    }
    # Only acct_b's known room (none) is left: the pool is used up until midnight.
    five_hour = over["pool"]["five-hour"]
    assert (five_hour["roomTokens"], five_hour["accountsForecast"], five_hour["outlook"]) == (
        0,
        1,
        "exhausted",
    )
