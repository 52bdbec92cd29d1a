"""The one account upsert's status rule (spec §3.1) as its two callers use it: an add leaves a
reached quota limit in force, an import clears it (spec §6.3); neither reactivates a disabled
or banned account."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.models import Account
from proxy.services.account_upsert import AccountWrite, account_upsert
from tests.proxy.factories import make_account

pytestmark = pytest.mark.django_db


def _write(identity: str, *, status: str, clears_quota_lock: bool) -> AccountWrite:
    return AccountWrite(
        new_id=f"acct_{uuid.uuid4().hex}",
        access_token="token-new",
        refresh_token=None,
        access_token_expires_at=None,
        next_refresh_at=None,
        chatgpt_account_id=identity,
        chatgpt_user_id=None,
        email=None,
        plan_type=None,
        label=None,
        status=status,
        clears_quota_lock=clears_quota_lock,
    )


def _locked_account(status: str = "quota_exhausted") -> Account:
    now = timezone.now()
    return make_account(
        chatgpt_account_id=f"ws-{uuid.uuid4().hex}",
        status=status,
        quota_limit_reached=True,
        quota_cooldown_until=now + timedelta(hours=1),
    )


def _state(account: Account) -> tuple:
    account.refresh_from_db()
    return (
        account.status,
        account.quota_limit_reached,
        account.quota_cooldown_until is None,
        account.access_token,
    )


def test_an_add_keeps_the_quota_lock_and_stays_quota_exhausted():
    account = _locked_account()

    stored = account_upsert(
        write=_write(account.chatgpt_account_id, status="active", clears_quota_lock=False),
        now=timezone.now(),
    )

    assert stored == (account.pk, False)
    assert _state(account) == ("quota_exhausted", True, False, "token-new")


def test_an_import_clears_the_quota_lock_and_takes_the_entrys_status():
    account = _locked_account()

    stored = account_upsert(
        write=_write(account.chatgpt_account_id, status="active", clears_quota_lock=True),
        now=timezone.now(),
    )

    assert stored == (account.pk, False)
    assert _state(account) == ("active", False, True, "token-new")


@pytest.mark.parametrize("clears_quota_lock", [False, True])
@pytest.mark.parametrize("kept", ["disabled", "banned"])
def test_neither_reactivates_a_disabled_or_banned_account(kept, clears_quota_lock):
    account = _locked_account(status=kept)

    account_upsert(
        write=_write(
            account.chatgpt_account_id, status="active", clears_quota_lock=clears_quota_lock
        ),
        now=timezone.now(),
    )

    assert _state(account)[0] == kept
