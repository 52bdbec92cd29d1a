"""Why an account does or does not serve ``/v1`` right now, as one verdict an operator can read.

The verdict is the scheduler's own rule (``pool.ineligibility``: a reached quota limit whose
cooldown has not passed, a status other than ``active``, an expired access token, a Cloudflare
cooldown — in that order — then the daily burn cap, which the request path applies in its
candidate query); the checks around it explain each condition with the time it ends,
and add what the rule does not block on but an operator wants to see: quota windows used up,
a usage check due before the next request, a token refresh running, the last failure recorded
in ``ops_error_logs``.
"""

from __future__ import annotations

from datetime import datetime

from proxy.admin_api import pool
from proxy.admin_api.display import china_iso, china_time
from proxy.admin_api.quota_windows import QuotaWindow
from proxy.daily_burn import DailyBurn
from proxy.models import Account
from telemetry.models import OpsErrorLog

DAILY_BURN_CAPPED = "daily_burn_capped"
SUMMARIES = {
    None: "Eligible: serves requests",
    pool.QUOTA_LIMITED: "Held back: its quota limit is reached",
    pool.NOT_ACTIVE: "Held back: its status is not active",
    pool.TOKEN_EXPIRED: "Held back: its access token has expired",
    pool.CLOUDFLARE_COOLDOWN: "Held back: cooling down after a Cloudflare challenge",
    DAILY_BURN_CAPPED: "Held back: its daily burn cap is reached (until 00:00 UTC)",
}


def _check(name: str, passed: bool, detail: str, until: datetime | None = None) -> dict:
    return {
        "name": name,
        "passed": passed,
        "detail": detail,
        "until": china_iso(until),
        "untilDisplay": china_time(until) if until else None,
    }


def _status_check(account: Account) -> dict:
    if account.status == "active":
        return _check("status", True, "status is active")
    reasons = {
        "disabled": "disabled by an operator (or after repeated Cloudflare path blocks)",
        "banned": "the upstream refused the account itself",
        "expired": "its tokens stopped working; a token refresh or new tokens bring it back",
        "quota_exhausted": "its quota is exhausted until the quota check lifts it",
    }
    return _check("status", False, f"status is {account.status}: {reasons[account.status]}")


def _quota_check(account: Account, *, now: datetime) -> dict:
    if not account.quota_limit_reached:
        return _check("quotaLimit", True, "no quota limit reached")
    until = account.quota_cooldown_until
    if until is None:
        return _check("quotaLimit", False, "quota limit reached; no reset time known")
    if until > now:
        return _check("quotaLimit", False, "quota limit reached until its reset", until)
    return _check("quotaLimit", True, "quota limit reached, but its cooldown has passed", until)


def _token_check(account: Account, *, now: datetime) -> dict:
    expiry = account.access_token_expires_at or pool.token_expiry(account.access_token)
    if expiry is None:
        return _check("accessToken", False, "opaque access token without a known expiry")
    if expiry <= now:
        return _check("accessToken", False, "the access token has expired", expiry)
    return _check("accessToken", True, "the access token is valid", expiry)


def _cloudflare_check(account: Account, *, now: datetime) -> dict:
    until = account.cloudflare_cooldown_until
    if until is not None and until > now:
        return _check(
            "cloudflareCooldown", False, "cooling down after a Cloudflare challenge", until
        )
    return _check("cloudflareCooldown", True, "no Cloudflare cooldown")


def _daily_burn_check(burn: DailyBurn) -> dict:
    if burn.cap_tokens is None:
        return _check("dailyBurnCap", True, "no daily burn cap")
    detail = f"{burn.burned_tokens} of its {burn.cap_tokens} tokens burned today (UTC)"
    return _check("dailyBurnCap", not burn.over_cap, detail, burn.resumes_at)


def _windows_check(windows: list[QuotaWindow]) -> dict:
    full = [window for window in windows if window.limit_reached]
    if not full:
        return _check("quotaWindows", True, "no quota window is used up")
    resets = [window.reset_at for window in full if window.reset_at]
    names = ", ".join(window.label for window in full)
    return _check("quotaWindows", False, f"used up: {names}", max(resets) if resets else None)


def _last_failure(error: OpsErrorLog | None) -> dict | None:
    if error is None:
        return None
    return {
        "at": china_iso(error.created_at),
        "atDisplay": china_time(error.created_at),
        "failureClass": error.failure_class,
        "statusCode": error.status_code,
        "message": error.message,
        "requestId": error.request_id,
    }


def eligibility_verdict(
    account: Account,
    *,
    windows: list[QuotaWindow],
    refreshing: bool,
    last_error: OpsErrorLog | None,
    daily_burn: DailyBurn,
    now: datetime,
) -> dict:
    reason = pool.ineligibility(account, now=now)
    if reason is None and daily_burn.over_cap:
        reason = DAILY_BURN_CAPPED
    checks = [
        _quota_check(account, now=now),
        _status_check(account),
        _token_check(account, now=now),
        _cloudflare_check(account, now=now),
        _daily_burn_check(daily_burn),
        _windows_check(windows),
        _check(
            "usageCheck",
            True,
            "its usage is checked before the next request it serves"
            if account.quota_verify_required
            else "no usage check pending",
        ),
        _check(
            "tokenRefresh",
            True,
            "a token refresh is running" if refreshing else "no token refresh running",
        ),
    ]
    blocking = next((check for check in checks if not check["passed"]), None)
    until = None
    if reason is not None and blocking is not None and blocking["until"]:
        until = blocking["until"]
    return {
        "eligible": reason is None,
        "verdict": reason or "eligible",
        "summary": SUMMARIES.get(reason, reason),
        "until": until,
        "refreshing": refreshing,
        "checks": checks,
        "lastFailure": _last_failure(last_error),
    }
