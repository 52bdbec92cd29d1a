"""Upstream quota (spec §4.3), read and parsed: the usage snapshot, from ``/wham/usage`` or from
the rate-limit headers of a successful answer ("passive sync"). How a snapshot changes an
account is written by ``proxy.services.account_quota``.

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
            raw = item.get("rate_limit")
            raw = raw if isinstance(raw, dict) else item
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
        window = _window(spend_control["individual_limit"], now)
        assert window is not None  # a dict (checked above) always gives a window
        monthly = {
            "key": "spend-control-monthly",
            "window_minutes": MONTH_MINUTES,
            **window,
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


def header_windows(headers: dict[str, str]) -> dict[str, dict[str, Any]]:
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
    windows = header_windows(headers)
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


class UsageFetchError(Exception):
    """The usage endpoint could not be read; ``status`` is its HTTP status when it answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


async def fetch_usage_payload(headers: list[tuple[str, str]]) -> dict:
    """The usage endpoint's JSON body (it must carry ``rate_limit``). Raises UsageFetchError."""
    try:
        answer = await codex.usage(headers=headers)
        payload = json.loads(answer.body)
    except codex.CodexHTTPError as error:
        if error.status == 404:
            raise UsageFetchError("no usage endpoint found", status=404) from None
        raise UsageFetchError(
            f"usage endpoint answered {error.status}", status=error.status
        ) from None
    except codex.CodexTransportError as error:
        raise UsageFetchError(f"usage endpoint unreachable ({error.detail})") from None
    except ValueError:
        raise UsageFetchError("invalid usage response") from None
    if not isinstance(payload, dict) or "rate_limit" not in payload:
        raise UsageFetchError("invalid usage response")
    return payload


async def fetch_usage(headers: list[tuple[str, str]], *, now: datetime) -> QuotaSnapshot:
    """The account's usage snapshot now. Raises UsageFetchError."""
    return snapshot_from_usage(await fetch_usage_payload(headers), now=now)
