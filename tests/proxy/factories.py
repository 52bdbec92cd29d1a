"""Row factories for the proxy's tables (tests only)."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.utils import timezone

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
