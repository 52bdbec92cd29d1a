"""Token refresh (spec §4.1–§4.2) against the fake OAuth server over real HTTP: each outcome of
one account's refresh, the lease, and the refresh scan."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy import redis_keys
from proxy.clients.oauth import OAuthTransportError, refresh_tokens
from proxy.models import Account, RuntimeSettings
from proxy.runtime_state import redis_client
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.services.token_refresh import RefreshResult, token_refresh_account, token_refresh_scan
from proxy.services.token_refresh_timing import jittered_margin_seconds, recovery_delay_seconds
from proxy.token_claims import token_expiry
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account

pytestmark = pytest.mark.django_db

ALICE = Identity("org-alice", "user-alice", "plus", "alice@example.com")


@pytest.fixture(autouse=True)
def runtime_row():
    runtime_settings_ensure(now=timezone.now())


class Sleeps(list):
    """Records the pauses a refresh asks for (the test never waits)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _row(account) -> Account:
    return Account.objects.get(pk=account.pk)


def test_a_refresh_stores_the_new_tokens_and_schedules_the_next(oauth):
    account = make_oauth_account(oauth, ALICE, expires_in=600)
    oauth.expires_in = 86400
    spent = account.refresh_token
    sleeps = Sleeps()

    result = token_refresh_account(account_id=account.pk, sleep=sleeps)

    assert result == RefreshResult.REFRESHED
    row = _row(account)
    assert row.access_token == oauth.issued_access_tokens[-1]
    assert row.refresh_token == oauth.issued_refresh_tokens[-1] != spent
    assert oauth.is_spent(spent) and oauth.is_live(row.refresh_token)
    assert row.access_token_expires_at == token_expiry(row.access_token)
    assert row.next_refresh_at == row.access_token_expires_at - timedelta(
        seconds=jittered_margin_seconds(account.pk, 3600)
    )
    assert row.status == "active"
    assert sleeps == []
    [call] = oauth.token_calls()
    assert call == {
        "grant_type": "refresh_token",
        "client_id": "app_EMoamEEZ73f0CkXaXp7hrann",
        "refresh_token": spent,
    }


def test_a_token_living_shorter_than_the_margin_is_refreshed_at_half_its_life(oauth):
    account = make_oauth_account(oauth, ALICE, expires_in=600)
    oauth.expires_in = 1800  # shorter than the 3600 s margin
    before = timezone.now()

    assert token_refresh_account(account_id=account.pk) == RefreshResult.REFRESHED

    row = _row(account)
    half_life = (row.access_token_expires_at - before) / 2
    assert before + half_life - timedelta(seconds=2) <= row.next_refresh_at
    assert row.next_refresh_at <= timezone.now() + half_life


def test_a_refresh_keeps_quota_exhausted_and_revives_an_expired_account(oauth):
    limited = make_oauth_account(
        oauth,
        ALICE,
        status="quota_exhausted",
        quota_limit_reached=True,
        quota_cooldown_until=timezone.now() + timedelta(hours=2),
    )
    demoted = make_oauth_account(
        oauth,
        Identity("org-bob", "user-bob"),
        status="expired",
        next_refresh_at=timezone.now(),  # what a 401 leaves behind
    )

    assert token_refresh_account(account_id=limited.pk) == RefreshResult.REFRESHED
    assert token_refresh_account(account_id=demoted.pk) == RefreshResult.REFRESHED

    assert _row(limited).status == "quota_exhausted"
    assert _row(demoted).status == "active"


def test_a_server_that_keeps_the_refresh_token_keeps_the_old_one(oauth):
    oauth.rotate = False
    account = make_oauth_account(oauth, ALICE)

    assert token_refresh_account(account_id=account.pk) == RefreshResult.REFRESHED

    row = _row(account)
    assert row.refresh_token == account.refresh_token
    assert row.access_token != account.access_token


def test_a_reused_refresh_token_bans_the_account_after_two_confirmations(oauth):
    account = make_oauth_account(oauth, ALICE, next_refresh_at=timezone.now())
    # Another client (say the Codex CLI on the operator's laptop) spent it first.
    refresh_tokens(account.refresh_token)
    oauth.server.clear()
    sleeps = Sleeps()

    result = token_refresh_account(account_id=account.pk, sleep=sleeps)

    assert result == RefreshResult.BANNED
    row = _row(account)
    assert (row.status, row.next_refresh_at) == ("banned", None)
    assert row.access_token == account.access_token  # nothing else written
    assert len(oauth.token_calls()) == 2
    assert len(sleeps) == 1 and 3.5 <= sleeps[0] <= 6.5  # 5 s ± 30 %


def test_a_deactivated_account_is_banned_after_two_confirmations(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "deactivated", "deactivated")

    assert token_refresh_account(account_id=account.pk, sleep=Sleeps()) == RefreshResult.BANNED
    assert _row(account).status == "banned"


def test_one_reused_answer_alone_bans_nothing(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "reused")

    result = token_refresh_account(account_id=account.pk, sleep=Sleeps())

    assert result == RefreshResult.REFRESHED
    assert _row(account).status == "active"
    assert len(oauth.token_calls()) == 2


@pytest.mark.parametrize("failure", ["unknown", "invalid_grant"])
def test_an_invalid_grant_expires_the_account_after_two_confirmations(oauth, failure):
    account = make_oauth_account(oauth, ALICE, next_refresh_at=timezone.now())
    oauth.fail(account.refresh_token, failure, failure)

    result = token_refresh_account(account_id=account.pk, sleep=Sleeps())

    assert result == RefreshResult.EXPIRED
    row = _row(account)
    assert (row.status, row.next_refresh_at) == ("expired", None)
    assert len(oauth.token_calls()) == 2


def test_transport_failures_retry_five_times_then_wait_ten_minutes(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "status", "drop", "status", "status", "status", status=503)
    sleeps = Sleeps()
    before = timezone.now()

    result = token_refresh_account(account_id=account.pk, sleep=sleeps)

    assert result == RefreshResult.RETRY_LATER
    row = _row(account)
    assert row.status == "active" and row.access_token == account.access_token
    assert row.refresh_token == account.refresh_token
    assert len(oauth.token_calls()) == 5
    nominal = [5, 15, 45, 135]
    assert len(sleeps) == 4
    for pause, base in zip(sleeps, nominal, strict=True):
        assert base * 0.7 <= pause <= base * 1.3
    assert sleeps != nominal  # jittered
    delay = (row.next_refresh_at - before).total_seconds()
    assert abs(delay - recovery_delay_seconds(account.pk)) < 5
    assert 480 <= recovery_delay_seconds(account.pk) <= 720

    # The jitter is stable: the same account pauses the same way next time.
    oauth.fail(account.refresh_token, *["status"] * 5)
    again = Sleeps()
    token_refresh_account(account_id=account.pk, sleep=again, force=True)
    assert again == sleeps


def test_a_transport_failure_then_success_refreshes(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "drop")
    sleeps = Sleeps()

    assert token_refresh_account(account_id=account.pk, sleep=sleeps) == RefreshResult.REFRESHED
    assert len(sleeps) == 1
    assert _row(account).refresh_token == oauth.issued_refresh_tokens[-1]


def test_a_refresh_stops_when_the_tokens_change_meanwhile(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "status")
    _, operators_refresh = oauth.issue(ALICE)

    def operator_rotates(seconds: float) -> None:
        Account.objects.filter(pk=account.pk).update(refresh_token=operators_refresh)

    result = token_refresh_account(account_id=account.pk, sleep=operator_rotates)

    assert result == RefreshResult.TOKEN_CHANGED
    assert len(oauth.token_calls()) == 1
    assert _row(account).refresh_token == operators_refresh
    assert oauth.is_live(operators_refresh)


def test_a_refresh_stops_when_the_account_is_disabled_meanwhile(oauth):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "status")

    def operator_disables(seconds: float) -> None:
        Account.objects.filter(pk=account.pk).update(status="disabled")

    result = token_refresh_account(account_id=account.pk, sleep=operator_disables)

    assert result == RefreshResult.NOT_ELIGIBLE
    assert len(oauth.token_calls()) == 1
    assert _row(account).status == "disabled"


def test_a_refresh_whose_time_moved_into_the_future_does_nothing(oauth):
    account = make_oauth_account(
        oauth, ALICE, next_refresh_at=timezone.now() + timedelta(minutes=30)
    )

    assert token_refresh_account(account_id=account.pk) == RefreshResult.NOT_DUE
    assert oauth.token_calls() == []
    # An operator's "refresh now" goes ahead anyway.
    assert token_refresh_account(account_id=account.pk, force=True) == RefreshResult.REFRESHED


def test_a_held_lease_means_no_token_call(oauth):
    account = make_oauth_account(oauth, ALICE)
    assert refresh_lease_acquire(account_id=account.pk, owner='"someone-else"', ttl_ms=60_000)
    try:
        assert token_refresh_account(account_id=account.pk) == RefreshResult.LEASE_BUSY
    finally:
        refresh_lease_release(account_id=account.pk, owner='"someone-else"')
    assert oauth.token_calls() == []
    assert _row(account).refresh_token == account.refresh_token


def test_an_operators_refresh_now_retries_an_account_a_refresh_gave_up_on(oauth):
    account = make_oauth_account(oauth, ALICE, status="expired", next_refresh_at=None)

    assert token_refresh_account(account_id=account.pk) == RefreshResult.NOT_ELIGIBLE
    assert token_refresh_account(account_id=account.pk, force=True) == RefreshResult.REFRESHED
    assert _row(account).status == "active"


@pytest.mark.parametrize("status", ["disabled", "banned"])
def test_disabled_or_banned_accounts_are_never_refreshed(oauth, status):
    account = make_oauth_account(oauth, ALICE, status=status)

    assert token_refresh_account(account_id=account.pk, force=True) == RefreshResult.NOT_ELIGIBLE
    assert oauth.token_calls() == []


def test_the_scan_schedules_refreshes_and_returns_the_due_ones(oauth):
    now = timezone.now()
    RuntimeSettings.objects.update(refresh_margin_seconds=1800)
    soon = make_oauth_account(oauth, ALICE, expires_in=600)  # inside the margin: due
    later = make_oauth_account(oauth, Identity("org-later", "user-later"), expires_in=86400)
    no_refresh = make_oauth_account(oauth, Identity("org-none", "user-none"), next_refresh_at=now)
    Account.objects.filter(pk=no_refresh.pk).update(refresh_token=None)
    gone = make_oauth_account(
        oauth, Identity("org-gone", "user-gone"), status="expired", next_refresh_at=None
    )

    report = token_refresh_scan(now=now)

    assert report.due == [soon.pk]
    assert _row(later).next_refresh_at == _row(later).access_token_expires_at - timedelta(
        seconds=jittered_margin_seconds(later.pk, 1800)
    )
    assert _row(no_refresh).next_refresh_at is None
    assert _row(gone).next_refresh_at is None
    assert oauth.token_calls() == []  # the scan only schedules
    # A second scan changes nothing and finds the same account due.
    again = token_refresh_scan(now=now)
    assert (again.due, again.scheduled, again.cleared) == ([soon.pk], 0, 0)


def test_the_scan_skips_accounts_whose_refresh_is_running(oauth):
    account = make_oauth_account(oauth, ALICE, expires_in=60)
    refresh_lease_acquire(account_id=account.pk, owner='"runner"', ttl_ms=60_000)
    try:
        report = token_refresh_scan(now=timezone.now())
    finally:
        refresh_lease_release(account_id=account.pk, owner='"runner"')
    assert (report.due, report.busy) == ([], 1)


def test_a_dripping_token_endpoint_ends_the_call_by_the_auth_timeout(oauth, settings):
    # Each byte arrives well inside the read timeout; only a deadline over the whole call
    # stops it (else it holds the refresh lease and permit for a minute here, hours in life).
    settings.OPENAI_AUTH_TIMEOUT_SECONDS = 1
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "drip")

    started = time.monotonic()
    with pytest.raises(OAuthTransportError) as raised:
        refresh_tokens(account.refresh_token)
    elapsed = time.monotonic() - started

    # (a minute without the deadline; the slack is for a loaded machine)
    assert elapsed < 1 + 5
    assert account.refresh_token not in str(raised.value)
    # The next call (same pooled session) works normally.
    assert refresh_tokens(account.refresh_token).access_token == oauth.issued_access_tokens[-1]


@pytest.mark.parametrize("how", ["taken by another worker", "flushed"])
def test_a_refresh_stops_when_its_lease_is_lost_between_attempts(oauth, how):
    account = make_oauth_account(oauth, ALICE)
    oauth.fail(account.refresh_token, "status", "status")
    lease_key = redis_keys.refresh_lease(account.pk)

    def lease_lost(seconds: float) -> None:
        redis_client().delete(lease_key)
        if how == "taken by another worker":
            assert refresh_lease_acquire(account_id=account.pk, owner='"other"', ttl_ms=60_000)

    result = token_refresh_account(account_id=account.pk, sleep=lease_lost)

    assert result == RefreshResult.LEASE_BUSY
    assert len(oauth.token_calls()) == 1  # no second token call without the lease
    assert oauth.is_live(account.refresh_token)
    if how == "taken by another worker":
        # The other worker's lease is left alone.
        assert refresh_lease_release(account_id=account.pk, owner='"other"')
