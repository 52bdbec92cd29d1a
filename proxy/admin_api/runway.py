"""Quota runway (issue 25, peers.md B.4): when each account, and the pool, would use up its
5-hour and weekly windows if the recent burn rate went on.

The upstream tells us how much of a window is used (a percentage in the stored quota snapshot,
``proxy.quota``) but not what a percent costs; the 15-minute buckets tell us what the proxy
sent through each account. So, per account and window:

* ``tokens in window`` — input + output tokens of the account's buckets since the window began
  (its reset minus its length, floored to the bucket);
* ``percent per token`` — used percent ÷ tokens in window (unknown when either is 0: the use
  came from outside the proxy, or there was none);
* ``burn rate`` — the account's tokens in the buckets since the start of the bucket one hour ago,
  per hour of that span (60 to 75 minutes: the current bucket is still filling);
* ``exhausts at`` — now + (100 − used) ÷ (percent per token × burn rate), unless the window
  resets first.

The pool's runway for a window: the room left on every account whose percent per token is
known, in tokens, divided by the whole pool's burn rate — as if the traffic moved to whichever
accounts still have room (the scheduler does that). Resets on the way are ignored, so the
figure errs early. An account over its daily burn cap (``proxy.daily_burn``) is not scheduled
until 00:00 UTC: its room is left out of the pool's, and each account shows today's burn
against its cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from proxy.admin_api.display import china_iso
from proxy.admin_api.quota_windows import QuotaWindow, quota_windows
from proxy.daily_burn import daily_burns
from proxy.models import Account, AccountStatus
from telemetry.queries.buckets import AccountWindow, bucket_usage_in_windows
from telemetry.services.buckets import bucket_start_for

RECENT = timedelta(hours=1)
RECENT_KEY = "recent"
WINDOW_KINDS = ("five-hour", "weekly")
# Accounts that serve requests (or will, once a window resets).
SERVING = (AccountStatus.ACTIVE, AccountStatus.QUOTA_EXHAUSTED)


@dataclass(frozen=True)
class WindowRunway:
    kind: str
    window: QuotaWindow
    tokens_in_window: int
    burn_tokens_per_hour: float

    @property
    def percent_per_token(self) -> float | None:
        if self.tokens_in_window <= 0 or self.window.used_percent <= 0:
            return None
        return self.window.used_percent / self.tokens_in_window

    @property
    def room_tokens(self) -> float | None:
        """What is left of the window, in the tokens the proxy has been sending."""
        per_token = self.percent_per_token
        if self.window.limit_reached:
            return 0.0
        return None if per_token is None else (100.0 - self.window.used_percent) / per_token

    def outlook(self, *, now: datetime) -> tuple[str, datetime | None]:
        """(``exhausted`` | ``exhausts`` | ``resets_first`` | ``idle`` | ``unknown``, when)."""
        if self.window.limit_reached:
            return "exhausted", self.window.reset_at
        if self.burn_tokens_per_hour <= 0:
            return "idle", None
        room = self.room_tokens
        if room is None:
            return "unknown", None
        at = now + timedelta(hours=room / self.burn_tokens_per_hour)
        if self.window.reset_at is not None and self.window.reset_at <= at:
            return "resets_first", None
        return "exhausts", at


def _window_of_kind(windows: list[QuotaWindow], kind: str) -> QuotaWindow | None:
    """The core window of that length (``codex-five-hour``, ``codex-weekly``)."""
    return next((window for window in windows if window.key == f"codex-{kind}"), None)


def recent_span(*, now: datetime) -> tuple[datetime, float]:
    """Where the burn rate is measured from, and how many hours that is."""
    start = bucket_start_for(now - RECENT)
    return start, (now - start).total_seconds() / 3600


def _window_item(runway: WindowRunway, *, now: datetime) -> dict:
    outlook, at = runway.outlook(now=now)
    per_token = runway.percent_per_token
    return {
        "key": runway.window.key,
        "label": runway.window.label,
        "usedPercent": runway.window.used_percent,
        "resetAt": china_iso(runway.window.reset_at),
        "tokensInWindow": runway.tokens_in_window,
        "burnTokensPerHour": round(runway.burn_tokens_per_hour, 1),
        "burnPercentPerHour": (
            round(per_token * runway.burn_tokens_per_hour, 3) if per_token is not None else None
        ),
        "outlook": outlook,
        "exhaustsAt": china_iso(at),
    }


def quota_runway(*, now: datetime) -> dict:
    """Per serving account and for the pool: the 5-hour and weekly runway (one bucket query)."""
    accounts = list(
        Account.objects.filter(status__in=SERVING)
        .order_by("added_at", "id")
        .only("id", "email", "status", "quota_json")
    )
    recent_start, recent_hours = recent_span(now=now)
    windows_of: dict[str, dict[str, QuotaWindow]] = {}
    asked: list[AccountWindow] = []
    for account in accounts:
        windows = quota_windows(account.quota_json)
        windows_of[account.pk] = {}
        for kind in WINDOW_KINDS:
            window = _window_of_kind(windows, kind)
            start = window.started_at(now=now) if window else None
            if window is not None and start is not None:
                windows_of[account.pk][kind] = window
                asked.append(AccountWindow(account.pk, kind, start))
        asked.append(AccountWindow(account.pk, RECENT_KEY, recent_start))
    sums = bucket_usage_in_windows(asked)
    burns = daily_burns([account.pk for account in accounts], now=now)

    items = []
    pool_room = {kind: 0.0 for kind in WINDOW_KINDS}
    pool_known = {kind: 0 for kind in WINDOW_KINDS}
    pool_burn = 0.0
    for account in accounts:
        recent = sums.get((account.pk, RECENT_KEY))
        burn = (recent.total_tokens if recent else 0) / recent_hours
        pool_burn += burn
        account_windows = []
        for kind, window in windows_of[account.pk].items():
            in_window = sums.get((account.pk, kind))
            runway = WindowRunway(kind, window, in_window.total_tokens if in_window else 0, burn)
            account_windows.append(_window_item(runway, now=now))
            room = runway.room_tokens
            if room is not None and not burns[account.pk].over_cap:
                pool_room[kind] += room
                pool_known[kind] += 1
        items.append(
            {
                "id": account.pk,
                "email": account.email,
                "status": account.status,
                "burnTokensPerHour": round(burn, 1),
                "dailyBurn": burns[account.pk].as_item(iso=china_iso),
                "windows": account_windows,
            }
        )

    pool = {}
    for kind in WINDOW_KINDS:
        if pool_known[kind] == 0:
            outlook, at = "unknown", None
        elif pool_room[kind] <= 0:
            outlook, at = "exhausted", None
        elif pool_burn <= 0:
            outlook, at = "idle", None
        else:
            outlook, at = "exhausts", now + timedelta(hours=pool_room[kind] / pool_burn)
        pool[kind] = {
            "outlook": outlook,
            "exhaustsAt": china_iso(at),
            "roomTokens": round(pool_room[kind]),
            "accountsForecast": pool_known[kind],
        }
    return {
        "generatedAt": china_iso(now),
        "burnMeasuredSince": china_iso(recent_start),
        "poolBurnTokensPerHour": round(pool_burn, 1),
        "pool": pool,
        "accounts": items,
    }
