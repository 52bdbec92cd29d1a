"""Row factories for the proxy's tables (tests only)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.utils import timezone

from proxy.accounts import AccountView
from proxy.models import Account, AccountCookie, Fingerprint


def make_account(*, now: datetime | None = None, **fields) -> Account:
    now = now or timezone.now()
    values = {
        "id": f"acct_{uuid.uuid4().hex}",
        "access_token": "token-" + uuid.uuid4().hex,
        "status": "active",
        "added_at": now,
        "updated_at": now,
    }
    values.update(fields)
    return Account.objects.create(**values)


def make_cookie(*, account: Account, now: datetime | None = None, **fields) -> AccountCookie:
    values = {
        "id": f"cookie_{uuid.uuid4().hex}",
        "account": account,
        "domain": "chatgpt.com",
        "name": "cf_clearance",
        "value": "secret-cookie-" + uuid.uuid4().hex,
        "path": "/",
        "updated_at": now or timezone.now(),
    }
    values.update(fields)
    return AccountCookie.objects.create(**values)


def make_fingerprint(*, now: datetime | None = None, **fields) -> Fingerprint:
    now = now or timezone.now()
    values = {
        "id": Fingerprint.CURRENT_ID,
        "originator": "Codex Desktop",
        "app_version": "26.519.81530",
        "build_number": "3178",
        "platform": "darwin",
        "arch": "arm64",
        "chromium_version": "146",
        "user_agent_template": "Codex Desktop/{version} ({platform}; {arch})",
        "default_headers_json": [],
        "header_order_json": [],
        "source": "config_seed",
        "created_at": now,
        "updated_at": now,
    }
    values.update(fields)
    return Fingerprint.objects.create(**values)


def make_account_view(account_id: str, *, now: datetime | None = None, **fields) -> AccountView:
    """A candidate as the request path reads it (no row behind it): active, token valid a day."""
    now = now or timezone.now()
    values = {
        "id": account_id,
        "email": None,
        "chatgpt_account_id": None,
        "plan_type": None,
        "access_token": f"token-{account_id}",
        "access_token_expires_at": now + timedelta(days=1),
        "status": "active",
        "quota_limit_reached": False,
        "quota_verify_required": False,
        "quota_cooldown_until": None,
        "cloudflare_cooldown_until": None,
        "added_at": now,
        "request_count": 0,
        "window_request_count": 0,
        "window_tokens": 0,
        "window_cached_tokens": 0,
        "window_reset_at": None,
        "limit_window_seconds": None,
        "last_used_at": None,
        "cookies": [],
    }
    values.update(fields)
    return AccountView(**values)
