"""Upstream quota (spec §4.3): the usage snapshot, from ``/wham/usage`` or from the rate-limit
headers of a successful answer ("passive sync"), and how it changes an account.

``quota_json`` keeps the normalised snapshot: ``{plan_type, snapshots[], monthly_limit, credits,
spend_control}``; each snapshot has ``primary``/``secondary`` windows with ``used_percent``
(0–100), ``reset_at`` (epoch seconds) and ``window_minutes``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from proxy.loop_resources import database_pool, upstream_session

logger = logging.getLogger(__name__)

MONTH_MINUTES = 43_200
MONTH_TOLERANCE = 0.05
_WINDOW_HEADER = re.compile(
    r"^x-(?P<id>[a-z0-9-]+?)-(?P<slot>primary|secondary)-(?P<field>used-percent|window-minutes|reset-at|reset-after-seconds)$"
)


@dataclass
class QuotaSnapshot:
    quota: dict[str, Any]
    limit_reached: bool
    reset_at: datetime | None
    plan_type: str | None
    window_seconds: int | None
    window_reset_at: datetime | None


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _window(raw: Any, now: datetime) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    used = _number(raw.get("used_percent"))
    used = 0.0 if used is None else min(100.0, max(0.0, used))
    reset_at = _number(raw.get("reset_at"))
    if reset_at is None:
        after = _number(raw.get("reset_after_seconds"))
        reset_at = now.timestamp() + after if after is not None else None
    seconds = _number(raw.get("limit_window_seconds"))
    minutes = _number(raw.get("window_minutes"))
    if minutes is None and seconds is not None:
        minutes = round(seconds / 60)
    return {
        "used_percent": used,
        "remaining_percent": 100.0 - used,
        "reset_at": int(reset_at) if reset_at is not None else None,
        "window_minutes": int(minutes) if minutes is not None else None,
        "limit_reached": used >= 100.0,
        "used": raw.get("used"),
        "limit": raw.get("limit"),
    }


def _limit_snapshot(raw: dict, *, source: str, limit_name: str | None, now: datetime) -> dict:
    primary = _window(raw.get("primary_window"), now)
    secondary = _window(raw.get("secondary_window"), now)
    windows = [window for window in (primary, secondary) if window]
    blocked = (
        bool(raw.get("limit_reached"))
        or raw.get("allowed") is False
        or any(window["limit_reached"] for window in windows)
    )
    return {
        "source": source,
        "limit_name": limit_name,
        "metered_feature": raw.get("metered_feature"),
        "allowed": raw.get("allowed"),
        "limit_reached": bool(raw.get("limit_reached")),
        "blocked": blocked,
        "primary": primary,
        "secondary": secondary,
    }


def _epoch(value: int | float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def snapshot_from_usage(payload: dict[str, Any], *, now: datetime) -> QuotaSnapshot:
    """Normalise a ``/wham/usage`` body (it must carry ``rate_limit``)."""
    snapshots = []
    if isinstance(payload.get("rate_limit"), dict):
        snapshots.append(
            _limit_snapshot(payload["rate_limit"], source="core", limit_name=None, now=now)
        )
    for item in payload.get("additional_rate_limits") or []:
        if isinstance(item, dict):
            raw = item.get("rate_limit") if isinstance(item.get("rate_limit"), dict) else item
            snapshots.append(
                _limit_snapshot(
                    raw, source="additional", limit_name=item.get("limit_name"), now=now
                )
            )
    credits = payload.get("credits") if isinstance(payload.get("credits"), dict) else None
    spend_control = (
        payload.get("spend_control") if isinstance(payload.get("spend_control"), dict) else None
    )
    monthly = None
    if spend_control and isinstance(spend_control.get("individual_limit"), dict):
        monthly = {
            "key": "spend-control-monthly",
            "window_minutes": MONTH_MINUTES,
            **_window(spend_control["individual_limit"], now),
        }
    else:
        for snapshot in snapshots:
            for window in (snapshot["primary"], snapshot["secondary"]):
                if (
                    window
                    and window["window_minutes"]
                    and abs(window["window_minutes"] - MONTH_MINUTES)
                    <= MONTH_MINUTES * MONTH_TOLERANCE
                ):
                    monthly = window
    spend_blocked = bool(
        spend_control
        and (
            spend_control.get("reached") or (_number(spend_control.get("used_percent")) or 0) >= 100
        )
    )
    monthly_blocked = bool(monthly and monthly.get("used_percent", 0) >= 100)
    credits_blocked = bool(credits and credits.get("overage_limit_reached"))
    blocking = [snapshot for snapshot in snapshots if snapshot["blocked"]]
    limit_reached = bool(blocking) or spend_blocked or monthly_blocked or credits_blocked

    core = snapshots[0] if snapshots and snapshots[0]["source"] == "core" else None
    first_core_reset = None
    if core:
        for window in (core["primary"], core["secondary"]):
            if window and window["reset_at"]:
                first_core_reset = window["reset_at"]
                break
    reset = None
    if (monthly_blocked or spend_blocked) and monthly:
        reset = monthly.get("reset_at")
    elif blocking:
        resets = [
            window["reset_at"]
            for snapshot in blocking
            for window in (snapshot["primary"], snapshot["secondary"])
            if window
            and window["reset_at"]
            and (
                window["limit_reached"] or snapshot["limit_reached"] or snapshot["allowed"] is False
            )
        ]
        reset = max(resets) if resets else first_core_reset
    if reset is None:
        reset = first_core_reset
    primary = core["primary"] if core else None
    return QuotaSnapshot(
        quota={
            "plan_type": payload.get("plan_type"),
            "snapshots": snapshots,
            "monthly_limit": monthly,
            "credits": credits,
            "spend_control": spend_control,
        },
        limit_reached=limit_reached,
        reset_at=_epoch(reset),
        plan_type=payload.get("plan_type") if isinstance(payload.get("plan_type"), str) else None,
        window_seconds=primary["window_minutes"] * 60
        if primary and primary["window_minutes"]
        else None,
        window_reset_at=_epoch(primary["reset_at"]) if primary else None,
    )


def snapshot_from_headers(
    headers: dict[str, str], *, now: datetime, stored: dict | None = None
) -> QuotaSnapshot | None:
    """The passive snapshot of a successful answer's rate-limit headers, or None without them.

    Windows come from ``x-<id>-(primary|secondary)-…`` headers; parts the headers do not carry
    (additional limits, spend control) are kept from the stored quota.
    """
    windows: dict[str, dict[str, Any]] = {}
    for name, value in headers.items():
        match = _WINDOW_HEADER.match(name.lower())
        if not match or match.group("id") not in ("codex", "codex-primary", "openai"):
            continue
        window = windows.setdefault(match.group("slot"), {})
        field = match.group("field")
        number = _number(value)
        if number is None:
            continue
        if field == "used-percent":
            window["used_percent"] = number
        elif field == "window-minutes":
            window["limit_window_seconds"] = number * 60
        elif field == "reset-at":
            window["reset_at"] = number
        else:
            window["reset_after_seconds"] = number
    if not windows:
        return None
    reached_type = headers.get("x-codex-rate-limit-reached-type")
    payload: dict[str, Any] = {
        "plan_type": headers.get("x-codex-plan-type") or (stored or {}).get("plan_type"),
        "rate_limit": {
            "allowed": reached_type is None,
            "limit_reached": reached_type is not None,
            "primary_window": windows.get("primary"),
            "secondary_window": windows.get("secondary"),
        },
    }
    stored = stored or {}
    snapshot = snapshot_from_usage(payload, now=now)
    snapshot.quota["snapshots"] += [
        kept for kept in stored.get("snapshots", []) if kept.get("source") == "additional"
    ]
    for key in ("credits", "spend_control", "monthly_limit"):
        if snapshot.quota.get(key) is None and stored.get(key) is not None:
            snapshot.quota[key] = stored[key]
    return snapshot


async def apply_snapshot(account_id: str, snapshot: QuotaSnapshot, *, now: datetime) -> None:
    """Store the snapshot and let it drive the account (spec §4.3).

    Sets the limit flag and cooldown (the reset time when blocked), clears the verify flag,
    toggles active ↔ quota_exhausted (never touching disabled, banned or expired accounts),
    updates the plan, and syncs the usage window: counters restart when the upstream's reset
    time moved by half a window or more (an hour when the window is unknown).
    """
    import json

    cooldown = snapshot.reset_at if snapshot.limit_reached else None
    pool = await database_pool.get()
    async with pool.connection() as connection:
        await connection.execute(
            "update accounts set quota_json = %s, quota_fetched_at = %s,"
            " quota_limit_reached = %s, quota_cooldown_until = %s, quota_verify_required = false,"
            " status = case when status in ('active', 'quota_exhausted')"
            "   then (case when %s then 'quota_exhausted' else 'active' end) else status end,"
            " plan_type = coalesce(%s, plan_type), updated_at = %s where id = %s",
            [
                json.dumps(snapshot.quota),
                now,
                snapshot.limit_reached,
                cooldown,
                snapshot.limit_reached,
                snapshot.plan_type,
                now,
                account_id,
            ],
        )
        if snapshot.window_reset_at is None:
            return
        drift_limit = (snapshot.window_seconds or 7200) / 2
        await connection.execute(
            """
            insert into account_usage as u (account_id, window_reset_at, limit_window_seconds)
            values (%(account)s, %(reset)s, %(seconds)s)
            on conflict (account_id) do update set
              window_request_count = case when u.drifted then 0 else u.window_request_count end,
              window_input_tokens = case when u.drifted then 0 else u.window_input_tokens end,
              window_output_tokens = case when u.drifted then 0 else u.window_output_tokens end,
              window_cached_tokens = case when u.drifted then 0 else u.window_cached_tokens end,
              window_image_input_tokens =
                case when u.drifted then 0 else u.window_image_input_tokens end,
              window_image_output_tokens =
                case when u.drifted then 0 else u.window_image_output_tokens end,
              window_image_request_count =
                case when u.drifted then 0 else u.window_image_request_count end,
              window_image_request_failed_count =
                case when u.drifted then 0 else u.window_image_request_failed_count end,
              window_started_at = case when u.drifted then null else u.window_started_at end,
              window_reset_at = excluded.window_reset_at,
              limit_window_seconds = coalesce(excluded.limit_window_seconds, u.limit_window_seconds)
            """.replace(
                "u.drifted",
                "(u.window_reset_at is not null and abs(extract(epoch from"
                " (excluded.window_reset_at - u.window_reset_at))) >= %(drift)s)",
            ),
            {
                "account": account_id,
                "reset": snapshot.window_reset_at,
                "seconds": snapshot.window_seconds,
                "drift": drift_limit,
            },
        )


def usage_urls() -> list[str]:
    """Where the usage endpoint may be (spec §2.1)."""
    base = settings.CODEX_UPSTREAM_BASE
    if "/backend-api" in base:
        return [f"{base}/wham/usage", f"{base}/codex/usage"]
    return [f"{base}/api/codex/usage", f"{base}/codex/usage"]


class UsageFetchError(Exception):
    """The usage endpoint could not be read."""


async def fetch_usage(headers: list[tuple[str, str]], *, now: datetime) -> QuotaSnapshot:
    """GET the usage endpoint (404 → next candidate URL). Raises UsageFetchError."""
    session = await upstream_session.get()
    for url in usage_urls():
        try:
            async with session.get(url, headers=headers, allow_redirects=False) as response:
                if response.status == 404:
                    continue
                if response.status >= 300:
                    raise UsageFetchError(f"usage endpoint answered {response.status}")
                payload = await response.json(content_type=None)
        except (OSError, TimeoutError, ValueError) as error:
            raise UsageFetchError(type(error).__name__) from None
        except Exception as error:  # aiohttp.ClientError and friends
            raise UsageFetchError(type(error).__name__) from None
        if not isinstance(payload, dict) or "rate_limit" not in payload:
            raise UsageFetchError("invalid usage response")
        return snapshot_from_usage(payload, now=now)
    raise UsageFetchError("no usage endpoint found")


async def passive_quota_sync(account_id: str, headers: dict[str, str], *, now: datetime) -> bool:
    """Apply the rate-limit headers of a successful answer; return whether there were any."""
    if not any("primary" in name or "secondary" in name for name in headers):
        return False
    pool = await database_pool.get()
    async with pool.connection() as connection:
        cursor = await connection.execute(
            "select quota_json from accounts where id = %s", [account_id]
        )
        row = await cursor.fetchone()
    if row is None:
        return False
    snapshot = snapshot_from_headers(headers, now=now, stored=row[0])
    if snapshot is None:
        return False
    await apply_snapshot(account_id, snapshot, now=now)
    return True
