"""Upstream quota (spec §4.3): the usage snapshot, from ``/wham/usage`` or from the rate-limit
headers of a successful answer ("passive sync"), and how it changes an account.

``quota_json`` keeps the normalised snapshot: ``{plan_type, snapshots[], monthly_limit, credits,
spend_control}``; each snapshot has ``primary``/``secondary`` windows with ``used_percent``
(0–100), ``reset_at`` (epoch seconds) and ``window_minutes``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proxy.clients import codex
from proxy.dispatch.accounts import restarted_window_columns
from proxy.loop_resources import database_connection

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


def _header_windows(headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The ``primary``/``secondary`` windows of ``x-<id>-(primary|secondary)-…`` headers."""
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
    return windows


def snapshot_from_headers(
    headers: dict[str, str], *, now: datetime, stored: dict | None = None
) -> QuotaSnapshot | None:
    """The passive snapshot of a successful answer's rate-limit headers, or None without them.

    Windows come from ``x-<id>-(primary|secondary)-…`` headers; parts the headers do not carry
    (additional limits, spend control, credits, an unknown plan) are kept from ``stored``.
    """
    windows = _header_windows(headers)
    if not windows:
        return None
    reached_type = headers.get("x-codex-rate-limit-reached-type")
    stored = stored or {}
    payload: dict[str, Any] = {
        "plan_type": headers.get("x-codex-plan-type") or stored.get("plan_type"),
        "rate_limit": {
            "allowed": reached_type is None,
            "limit_reached": reached_type is not None,
            "primary_window": windows.get("primary"),
            "secondary_window": windows.get("secondary"),
        },
    }
    snapshot = snapshot_from_usage(payload, now=now)
    snapshot.quota["snapshots"] += [
        kept for kept in stored.get("snapshots", []) if kept.get("source") == "additional"
    ]
    for key in ("credits", "spend_control", "monthly_limit"):
        if snapshot.quota.get(key) is None and stored.get(key) is not None:
            snapshot.quota[key] = stored[key]
    return snapshot


# ``snapshot_from_headers``'s merge with the stored quota, in SQL over the row ``a`` being
# updated: the passive sync then needs no read before its write.
_QUOTA_MERGED_WITH_STORED = """
jsonb_build_object(
  'plan_type', coalesce(%(plan)s::jsonb, a.quota_json->'plan_type', 'null'::jsonb),
  'snapshots', %(snapshots)s::jsonb || coalesce(
    jsonb_path_query_array(a.quota_json, '$.snapshots[*] ? (@.source == "additional")'),
    '[]'::jsonb),
  'monthly_limit', coalesce(%(monthly_limit)s::jsonb, a.quota_json->'monthly_limit', 'null'),
  'credits', coalesce(a.quota_json->'credits', 'null'::jsonb),
  'spend_control', coalesce(a.quota_json->'spend_control', 'null'::jsonb))
"""
_QUOTA_AS_FETCHED = "%(quota)s::jsonb"
_PLAN_MERGED_WITH_STORED = "coalesce(%(plan_text)s, a.quota_json->>'plan_type', a.plan_type)"
_PLAN_AS_FETCHED = "coalesce(%(plan_text)s, a.plan_type)"

# One statement: the account row takes the snapshot, and (when the upstream named a window
# reset) the usage window follows; its counters restart when the reset moved by half a window
# or more. A snapshot that changes nothing on the account writes nothing at all.
_APPLY_SQL = """
with incoming as (
  select a.id, {quota} as quota, {plan} as plan_type,
    case when a.status in ('active', 'quota_exhausted')
      then (case when %(limit_reached)s then 'quota_exhausted' else 'active' end)
      else a.status end as status
  from accounts a where a.id = %(account)s
), applied as (
  update accounts a set quota_json = i.quota, quota_fetched_at = %(now)s,
    quota_limit_reached = %(limit_reached)s, quota_cooldown_until = %(cooldown)s,
    quota_verify_required = false, status = i.status, plan_type = i.plan_type,
    updated_at = %(now)s
  from incoming i
  where a.id = i.id
    and (a.quota_json, a.quota_limit_reached, a.quota_cooldown_until, a.quota_verify_required,
         a.status, a.plan_type)
        is distinct from
        (i.quota, %(limit_reached)s, %(cooldown)s::timestamptz, false, i.status, i.plan_type)
  returning a.id
)
insert into account_usage as u (account_id, window_reset_at, limit_window_seconds)
select id, %(reset)s::timestamptz, %(seconds)s::bigint from applied
where %(reset)s::timestamptz is not null
on conflict (account_id) do update set {restart},
  window_reset_at = excluded.window_reset_at,
  limit_window_seconds = coalesce(excluded.limit_window_seconds, u.limit_window_seconds)
"""
_DRIFTED = (
    "(u.window_reset_at is not null and abs(extract(epoch from"
    " (excluded.window_reset_at - u.window_reset_at))) >= %(drift)s)"
)
_RESTART = restarted_window_columns(when=_DRIFTED)
_APPLY_FETCHED_SQL = _APPLY_SQL.format(
    quota=_QUOTA_AS_FETCHED, plan=_PLAN_AS_FETCHED, restart=_RESTART
)
_APPLY_PASSIVE_SQL = _APPLY_SQL.format(
    quota=_QUOTA_MERGED_WITH_STORED, plan=_PLAN_MERGED_WITH_STORED, restart=_RESTART
)


def _apply_parameters(account_id: str, snapshot: QuotaSnapshot, *, now: datetime) -> dict:
    return {
        "account": account_id,
        "now": now,
        "limit_reached": snapshot.limit_reached,
        "cooldown": snapshot.reset_at if snapshot.limit_reached else None,
        "reset": snapshot.window_reset_at,
        "seconds": snapshot.window_seconds,
        "drift": (snapshot.window_seconds or 7200) / 2,
    }


async def _execute(sql: str, parameters: dict) -> int:
    async with database_connection() as connection:
        cursor = await connection.execute(sql, parameters)
        return cursor.rowcount


async def apply_snapshot(account_id: str, snapshot: QuotaSnapshot, *, now: datetime) -> None:
    """Store a fetched snapshot and let it drive the account (spec §4.3); one statement.

    Sets the limit flag and cooldown (the reset time when blocked), clears the verify flag,
    toggles active ↔ quota_exhausted (never touching disabled, banned or expired accounts),
    updates the plan, and syncs the usage window: counters restart when the upstream's reset
    time moved by half a window or more (an hour when the window is unknown).
    """
    await _execute(
        _APPLY_FETCHED_SQL,
        {
            **_apply_parameters(account_id, snapshot, now=now),
            "quota": json.dumps(snapshot.quota),
            "plan_text": snapshot.plan_type,
        },
    )


class UsageFetchError(Exception):
    """The usage endpoint could not be read."""


async def fetch_usage(headers: list[tuple[str, str]], *, now: datetime) -> QuotaSnapshot:
    """GET the usage endpoint (404 → next candidate URL). Raises UsageFetchError."""
    for url in codex.usage_urls():
        try:
            response = await codex.get(url, headers=headers)
            try:
                if response.status == 404:
                    continue
                if response.status >= 300:
                    raise UsageFetchError(f"usage endpoint answered {response.status}")
                payload = await response.json(content_type=None)
            finally:
                response.release()
        except (*codex.TRANSPORT_ERRORS, ValueError) as error:
            raise UsageFetchError(type(error).__name__) from None
        if not isinstance(payload, dict) or "rate_limit" not in payload:
            raise UsageFetchError("invalid usage response")
        return snapshot_from_usage(payload, now=now)
    raise UsageFetchError("no usage endpoint found")


async def passive_quota_sync(account_id: str, headers: dict[str, str], *, now: datetime) -> bool:
    """Apply the rate-limit headers of a successful answer (spec §4.3 "passive sync").

    Returns whether the headers carried a window. One statement, merged with the stored quota
    in SQL; a snapshot identical to the stored one writes nothing.
    """
    if not _header_windows(headers):
        return False
    # The stored quota enters in SQL; parse without it here (only the header parts are used).
    snapshot = snapshot_from_headers(headers, now=now)
    plan = headers.get("x-codex-plan-type") or None
    await _execute(
        _APPLY_PASSIVE_SQL,
        {
            **_apply_parameters(account_id, snapshot, now=now),
            "plan": json.dumps(plan) if plan else None,
            "plan_text": plan,
            "snapshots": json.dumps(snapshot.quota["snapshots"]),
            "monthly_limit": json.dumps(snapshot.quota["monthly_limit"])
            if snapshot.quota["monthly_limit"] is not None
            else None,
        },
    )
    return True
