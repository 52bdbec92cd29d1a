"""The quota windows of an account as the console shows them (spec §6.3, console page): read
from the stored ``quota_json`` snapshot (``proxy.quota``'s normalised shape).

Keys name the window (``codex-five-hour``, ``codex-weekly``, ``codex-monthly``, …); ``group``
is ``shortTerm`` for the 5-hour and weekly windows, ``monthly`` for a month, ``other`` else
(codex-proxy-console.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from proxy.admin_api.display import from_epoch

FIVE_HOURS = 300
WEEK = 7 * 24 * 60
MONTH = 30 * 24 * 60
HIGH_USAGE_PERCENT = 80.0


@dataclass(frozen=True)
class QuotaWindow:
    key: str
    group: str
    label: str
    window_minutes: int | None
    used_percent: float
    reset_at: datetime | None
    limit_reached: bool
    used: Any = None
    limit: Any = None

    @property
    def window_seconds(self) -> int | None:
        return self.window_minutes * 60 if self.window_minutes else None

    def started_at(self, *, now: datetime) -> datetime | None:
        """Where the window began: its reset minus its length (now minus its length when the
        reset is unknown)."""
        if not self.window_seconds:
            return None
        end = self.reset_at if self.reset_at and self.reset_at > now else now
        return end - timedelta(seconds=self.window_seconds)


def _kind(minutes: int | None) -> tuple[str, str, str]:
    """(key suffix, group, label) of a window length."""
    if minutes is None:
        return "window", "other", "Window"
    if abs(minutes - FIVE_HOURS) <= 15:
        return "five-hour", "shortTerm", "5-hour"
    if abs(minutes - WEEK) <= 60:
        return "weekly", "shortTerm", "Weekly"
    if abs(minutes - MONTH) <= MONTH * 0.05:
        return "monthly", "monthly", "Monthly"
    if minutes % 60 == 0:
        return f"{minutes // 60}h", "other", f"{minutes // 60}-hour"
    return f"{minutes}m", "other", f"{minutes}-minute"


def _window(raw: Any, *, prefix: str, label_prefix: str) -> QuotaWindow | None:
    if not isinstance(raw, dict):
        return None
    minutes = raw.get("window_minutes")
    minutes = int(minutes) if isinstance(minutes, int | float) and minutes > 0 else None
    suffix, group, label = _kind(minutes)
    used = raw.get("used_percent")
    used = float(used) if isinstance(used, int | float) else 0.0
    return QuotaWindow(
        key=f"{prefix}-{suffix}",
        group=group,
        label=f"{label_prefix}{label}",
        window_minutes=minutes,
        used_percent=max(0.0, min(100.0, used)),
        reset_at=from_epoch(raw.get("reset_at")),
        limit_reached=bool(raw.get("limit_reached")) or used >= 100,
        used=raw.get("used"),
        limit=raw.get("limit"),
    )


def quota_windows(quota: Any) -> list[QuotaWindow]:
    """Every window of a stored snapshot (core first, then additional limits, then a monthly
    spend limit not already listed); [] for no snapshot."""
    if not isinstance(quota, dict):
        return []
    windows: list[QuotaWindow] = []
    for snapshot in quota.get("snapshots") or []:
        if not isinstance(snapshot, dict):
            continue
        if snapshot.get("source") == "core":
            prefix, label_prefix = "codex", ""
        else:
            name = str(snapshot.get("limit_name") or "additional")
            prefix, label_prefix = name, f"{name} "
        for slot in ("primary", "secondary"):
            window = _window(snapshot.get(slot), prefix=prefix, label_prefix=label_prefix)
            if window is not None and all(known.key != window.key for known in windows):
                windows.append(window)
    monthly = quota.get("monthly_limit")
    if isinstance(monthly, dict) and not any(window.group == "monthly" for window in windows):
        window = _window(monthly, prefix="spend-control", label_prefix="Spend ")
        if window is not None:
            windows.append(window)
    return windows


def preferred_used_percent(windows: list[QuotaWindow]) -> float | None:
    """The 5-hour window's use, else the weekly's, else the monthly's (spec §6.7)."""
    for suffix in ("five-hour", "weekly", "monthly"):
        for window in windows:
            if window.key.endswith(suffix):
                return window.used_percent
    return None


def is_high_usage(windows: list[QuotaWindow]) -> bool:
    return any(window.used_percent >= HIGH_USAGE_PERCENT for window in windows)
