"""The accounts list at a glance (issue 38 item 2): each row's plan, status with its reason and
the eligibility verdict in words, the 5-hour and weekly quota bars with their reset times,
today's tokens against the daily cap, when it last served — read for the page at once — and
the row actions (read quota now, refresh token, enable / disable) through the services."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from common import clock
from proxy.models import Account, AccountUsage, AdminUser
from proxy.services.account_policies import account_policy_set
from proxy.services.admin_users import admin_user_create_default
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.ledger import ops_error_log_create
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account
from tests.proxy.factories import make_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("console_in_utc")]


LIST = "/admin/proxy/account/"


@pytest.fixture
def operator(client):
    runtime_settings_ensure(now=timezone.now())
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


def _quota(*, five_hour: float, weekly: float, five_hour_reset: datetime, weekly_reset) -> dict:
    return {
        "plan_type": "plus",
        "snapshots": [
            {
                "source": "core",
                "primary": {
                    "used_percent": five_hour,
                    "window_minutes": 300,
                    "reset_at": int(five_hour_reset.timestamp()),
                    "limit_reached": five_hour >= 100,
                },
                "secondary": {
                    "used_percent": weekly,
                    "window_minutes": 10080,
                    "reset_at": int(weekly_reset.timestamp()),
                    "limit_reached": False,
                },
            }
        ],
    }


def _row(page: str, account: Account) -> str:
    """The text of the account's row (tags and repeated blanks dropped)."""
    href = f'href="/admin/proxy/account/{quote(account.pk)}/change/"'
    [row] = [row.split("</tr>")[0] for row in page.split("<tr")[1:] if href in row]
    actions = re.findall(r'data-action="([a-z-]+)"', row)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", "<tr" + row)).strip()
    return f"{text} | actions: {' '.join(actions)}"


def _usage_json(used: float, *, reset: datetime) -> dict:
    return {
        "plan_type": "pro",
        "rate_limit": {
            "allowed": used < 100,
            "limit_reached": used >= 100,
            "primary_window": {
                "used_percent": used,
                "limit_window_seconds": 18000,
                "reset_at": int(reset.timestamp()),
            },
            "secondary_window": {
                "used_percent": 7,
                "limit_window_seconds": 604800,
                "reset_at": int((reset + timedelta(days=3)).timestamp()),
            },
        },
    }


def test_each_row_shows_the_account_at_a_glance(operator):
    noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    with clock.frozen(noon):
        # Logged in at the pinned time: the session's idle limit counts business time.
        operator.force_login(AdminUser.objects.get())
        # given: a capped active account in use, a quota-limited one, a disabled one
        main = make_account(
            label="main",
            email="main@example.com",
            plan_type="plus",
            refresh_token="rt-main",
            access_token_expires_at=noon + timedelta(days=2),
            next_refresh_at=noon + timedelta(hours=20),
            quota_fetched_at=noon - timedelta(minutes=3),
            quota_json=_quota(
                five_hour=42,
                weekly=10,
                five_hour_reset=noon + timedelta(hours=2, minutes=20),
                weekly_reset=datetime(noon.year, 1, 1, 9, tzinfo=UTC) + timedelta(days=400),
            ),
        )
        account_policy_set(account=main, daily_burn_cap_tokens=5000, now=noon)
        AccountUsage.objects.create(
            account=main,
            input_tokens=1000,
            output_tokens=200,
            last_used_at=noon - timedelta(minutes=5),
        )
        tired = make_account(
            email="tired@example.com",
            plan_type="team",
            status="quota_exhausted",
            quota_limit_reached=True,
            quota_cooldown_until=noon + timedelta(hours=1),
            access_token_expires_at=noon + timedelta(days=2),
            quota_fetched_at=noon,
            quota_json=_quota(
                five_hour=100,
                weekly=64,
                five_hour_reset=noon + timedelta(hours=1),
                weekly_reset=noon + timedelta(days=2),
            ),
        )
        ops_error_log_create(
            created_at=noon - timedelta(minutes=30),
            message="upstream answered 429",
            account_id=tired.pk,
            status_code=429,
            failure_class="rate_limited",
        )
        resting = make_account(email="rest@example.com", status="disabled")

        # when
        page = operator.get(LIST).content.decode()

    # then
    weekly_reset = (datetime(noon.year, 1, 1, 9, tzinfo=UTC) + timedelta(days=400)).strftime(
        "%Y-%m-%d %H:%M"
    )
    next_refresh = (noon + timedelta(hours=20)).strftime("%Y-%m-%d %H:%M")
    assert _row(page, main) == (
        "main main@example.com plus active Eligible: serves requests "
        f"next token refresh {next_refresh} "
        "42% · resets 14:20 "
        f"10% · resets {weekly_reset} "
        "1,200 / 5,000 tokens 5 minutes ago "
        "test read quota refresh token disable | actions: read-quota refresh-token disable"
    )
    two_days = (noon + timedelta(days=2)).strftime("%m-%d %H:%M")
    if (noon + timedelta(days=2)).year != noon.year:
        two_days = (noon + timedelta(days=2)).strftime("%Y-%m-%d %H:%M")
    assert _row(page, tired) == (
        "tired@example.com team quota exhausted "
        "Held back: its quota limit is reached until 13:00 "
        "its quota is exhausted until the quota check lifts it "
        "last failure 11:30: 429 rate_limited no refresh token "
        "100% · resets 13:00 "
        f"64% · resets {two_days} "
        "0 (no cap) never test read quota disable | actions: read-quota disable"
    )
    assert _row(page, resting) == (
        "rest@example.com plan not known disabled Held back: its status is not active "
        "disabled by an operator (or after repeated Cloudflare path blocks) "
        "opaque access token without a known expiry no refresh token "
        "not read yet not read yet 0 (no cap) never "
        "test read quota enable | actions: read-quota enable"
    )
    # The bars carry the figures as numbers (what the browser test reads back).
    assert 'data-used="42"' in page and 'data-used="100"' in page
    assert "Quota json" not in page


def test_a_page_of_accounts_costs_the_same_queries_whatever_its_size(operator):
    def queries_for_the_list() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator.get(LIST).status_code == 200
        return len(queries.captured_queries)

    for index in range(2):
        make_account(email=f"few{index}@example.com")
    few = queries_for_the_list()
    for index in range(10):
        make_account(email=f"many{index}@example.com", refresh_token=f"rt-{index}")

    assert queries_for_the_list() == few


def _post_action(operator, account: Account, action: str, **fields):
    url = f"/admin/proxy/account/{quote(account.pk)}/do/{action}/"
    return operator.post(url, {"back": f"{LIST}?status__exact=active", **fields}, follow=True)


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_read_quota_now_stores_the_snapshot_and_says_what_it_found(operator, upstream):
    now = timezone.now()
    account = make_account(
        label="reader", access_token="tok-read", access_token_expires_at=now + timedelta(days=1)
    )
    upstream.usage["tok-read"] = _usage_json(35, reset=now + timedelta(hours=3))

    response = _post_action(operator, account, "read-quota")

    assert response.redirect_chain == [(f"{LIST}?status__exact=active", 302)]
    [message] = _messages(response)
    assert message.startswith("The quota of reader was read: 5-hour 35% used (resets ")
    assert ", weekly 7% used (resets " in message
    stored = Account.objects.get(pk=account.pk)
    assert stored.quota_fetched_at is not None and stored.plan_type == "pro"
    page = response.content.decode()
    assert "35% · resets" in _row(page, stored) and "7% · resets" in _row(page, stored)


def test_a_quota_read_the_upstream_refuses_changes_nothing(operator, upstream):
    account = make_account(label="refused", access_token="tok-401")
    upstream.usage["tok-401"] = 401

    response = _post_action(operator, account, "read-quota")

    assert _messages(response) == [
        "The quota of refused could not be read: usage endpoint answered 401."
    ]
    stored = Account.objects.get(pk=account.pk)
    assert (stored.quota_json, stored.quota_fetched_at, stored.status) == (None, None, "active")


def test_disable_and_enable_from_the_row(operator):
    account = make_account(label="toggled")
    limited = make_account(label="limited", status="disabled", quota_limit_reached=True)

    disabled = _post_action(operator, account, "disable")
    assert Account.objects.get(pk=account.pk).status == "disabled"
    enabled = _post_action(operator, account, "enable")
    limited_enabled = _post_action(operator, limited, "enable")

    assert _messages(disabled) == ["toggled was disabled: it serves nothing until enabled."]
    assert _messages(enabled) == ["toggled was enabled (active)."]
    assert Account.objects.get(pk=account.pk).status == "active"
    assert _messages(limited_enabled) == [
        "limited was enabled; its quota limit is reached, so it is stored as quota_exhausted "
        "until the quota check finds it lifted."
    ]
    assert Account.objects.get(pk=limited.pk).status == "quota_exhausted"


def test_refresh_token_from_the_row_stores_new_tokens(operator, oauth):
    account = make_oauth_account(oauth, Identity("org-row", "user-row", "plus", "row@example.com"))
    before = account.access_token

    response = _post_action(operator, account, "refresh-token")

    assert _messages(response) == ["The tokens of row@example.com were refreshed."]
    assert Account.objects.get(pk=account.pk).access_token != before
    assert len(oauth.token_calls()) == 1


def test_row_actions_are_posts_with_the_csrf_token_and_return_only_to_the_list(operator):
    account = make_account(label="guarded")
    url = f"/admin/proxy/account/{quote(account.pk)}/do/disable/"
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = operator.cookies

    fetched = operator.get(url)
    forged = strict.post(url, {"back": LIST})
    unknown = operator.post(f"/admin/proxy/account/{quote(account.pk)}/do/delete/")
    elsewhere = operator.post(url, {"back": "https://evil.example/admin/proxy/account/"})

    assert fetched.status_code == 405
    assert forged.status_code == 403
    assert unknown.status_code == 404
    assert (elsewhere.status_code, elsewhere["Location"]) == (302, LIST)
    assert Account.objects.get(pk=account.pk).status == "disabled"  # by the last, valid post


def test_the_account_page_shows_its_quota_windows_and_verdict_not_raw_json(operator):
    now = timezone.now()
    account = make_account(
        label="paged",
        access_token_expires_at=now + timedelta(days=1),
        quota_fetched_at=now,
        quota_json=_quota(
            five_hour=42,
            weekly=10,
            five_hour_reset=now + timedelta(hours=2),
            weekly_reset=now + timedelta(days=3),
        ),
    )
    unread = make_account(label="unread")

    page = operator.get(f"/admin/proxy/account/{quote(account.pk)}/change/").content.decode()
    empty = operator.get(f"/admin/proxy/account/{quote(unread.pk)}/change/").content.decode()

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "5-hour 42% · resets" in text and "Weekly 10% · resets" in text
    assert "Eligible: serves requests" in text
    assert "Quota json" not in page and "snapshots" not in page
    assert "not read yet" in empty
