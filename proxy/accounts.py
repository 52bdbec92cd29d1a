"""Account rules (spec §3.2), pure: what an account row means, with no I/O.

``AccountView`` is a candidate as the request path reads it (``proxy.selectors``); the state
transitions are written by ``proxy.services.account_state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from proxy.models import ACCOUNT_USAGE_COUNTERS
from proxy.token_claims import token_expiry


@dataclass
class AccountView:
    """One row of ``accounts`` joined with its ``account_usage`` counters."""

    id: str
    email: str | None
    chatgpt_account_id: str | None
    plan_type: str | None
    access_token: str
    access_token_expires_at: datetime | None
    status: str
    quota_limit_reached: bool
    quota_verify_required: bool
    quota_cooldown_until: datetime | None
    cloudflare_cooldown_until: datetime | None
    added_at: datetime
    request_count: int
    window_request_count: int
    window_tokens: int
    window_cached_tokens: int
    window_reset_at: datetime | None
    limit_window_seconds: int | None
    last_used_at: datetime | None
    cookies: list[dict]
    # Whether a 401 may be answered by a token refresh (the token itself stays in PostgreSQL).
    has_refresh_token: bool = False

    def copy(self) -> AccountView:
        """A shallow copy (the cookie list is shared and never changed in place)."""
        twin = object.__new__(AccountView)
        twin.__dict__.update(self.__dict__)
        return twin


_TIMESTAMP_FIELDS = (
    "access_token_expires_at",
    "quota_cooldown_until",
    "cloudflare_cooldown_until",
    "added_at",
    "window_reset_at",
    "last_used_at",
)


def accounts_from_json(rows: list[dict]) -> list[AccountView]:
    """AccountViews from the rows of ``CANDIDATES_JSON_SQL``."""
    accounts = []
    for row in rows:
        for name in _TIMESTAMP_FIELDS:
            value = row.get(name)
            if value is not None:
                row[name] = datetime.fromisoformat(value)
        accounts.append(AccountView(**row))
    return accounts


# The window group of account_usage: what a new usage window starts from zero.
WINDOW_COUNTERS = tuple(column for column in ACCOUNT_USAGE_COUNTERS if column.startswith("window_"))


def restarted_window_columns(*, when: str | None = None) -> str:
    """``SET`` items of ``account_usage`` that zero the window counters and clear
    ``window_started_at``: always, or (in an upsert on ``account_usage as u``) only where the
    SQL condition ``when`` holds."""
    if when is None:
        items = [f"{column} = 0" for column in WINDOW_COUNTERS]
        items.append("window_started_at = null")
    else:
        items = [
            f"{column} = case when {when} then 0 else u.{column} end" for column in WINDOW_COUNTERS
        ]
        items.append(f"window_started_at = case when {when} then null else u.window_started_at end")
    return ", ".join(items)


def jwt_expiry(token: str) -> datetime | None:
    """``exp`` of a JWT access token (signature not checked: we only schedule by it).

    None when the token is opaque or has no numeric ``exp`` (callers treat that as expired).
    """
    return token_expiry(token)


class AccountState(Protocol):
    """What eligibility looks at: an ``AccountView`` or a ``proxy.models.Account`` row."""

    status: str
    quota_limit_reached: bool
    quota_cooldown_until: datetime | None
    cloudflare_cooldown_until: datetime | None
    access_token: str
    access_token_expires_at: datetime | None


QUOTA_LIMITED = "quota_limited"
NOT_ACTIVE = "not_active"
TOKEN_EXPIRED = "token_expired"
CLOUDFLARE_COOLDOWN = "cloudflare_cooldown"


def ineligibility(account: AccountState, *, now: datetime) -> str | None:
    """Why ``account`` may not serve at ``now`` (spec §3.2), or None when it may.

    Checked in this order: a quota limit whose cooldown has not passed, a status other than
    ``active``, an access token past its expiry (opaque tokens without a stored expiry count as
    expired, pitfall §11.7), a Cloudflare cooldown.
    """
    if account.quota_limit_reached and (
        account.quota_cooldown_until is None or account.quota_cooldown_until > now
    ):
        return QUOTA_LIMITED
    if account.status != "active":
        return NOT_ACTIVE
    expiry = account.access_token_expires_at or jwt_expiry(account.access_token)
    if expiry is None or expiry <= now:
        return TOKEN_EXPIRED
    if account.cloudflare_cooldown_until is not None and account.cloudflare_cooldown_until > now:
        return CLOUDFLARE_COOLDOWN
    return None


def eligible_again_at(account: AccountView, *, now: datetime) -> datetime | None:
    """When an account that may not serve now will be able to by the clock alone (a quota
    cooldown or usage window passing, a Cloudflare cooldown ending), or None when the clock
    will not bring it back (disabled, banned, expired, a quota limit with no known reset)."""
    if account.status not in ("active", "quota_exhausted"):
        return None
    ready = now
    if account.quota_limit_reached:
        ends = [
            moment
            for moment in (account.quota_cooldown_until, account.window_reset_at)
            if moment is not None
        ]
        if not ends:
            return None
        ready = max(ready, min(ends))
    elif account.status != "active":
        return None
    if account.cloudflare_cooldown_until is not None:
        ready = max(ready, account.cloudflare_cooldown_until)
    expiry = account.access_token_expires_at or jwt_expiry(account.access_token)
    if expiry is None or expiry <= ready:
        return None
    return ready


def next_window_reset(account: AccountView, *, now: datetime) -> datetime | None:
    """Where a passed usage window's reset moves: forward by whole windows (None when the
    window length is unknown)."""
    seconds = account.limit_window_seconds
    if not seconds or account.window_reset_at is None:
        return None
    elapsed = (now - account.window_reset_at).total_seconds()
    windows = int(elapsed // seconds) + 1
    return account.window_reset_at + timedelta(seconds=windows * seconds)
