"""The model refresh (spec §4.5): one eligible account per plan asks the upstream which models
it offers; the plan snapshots in Redis are replaced as a whole.

Runs in the Celery worker (synchronous ``requests``). A plan whose fetch fails or returns nothing
keeps its previous snapshot; plans no account has any more disappear.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import requests
from django.conf import settings

from proxy import identity
from proxy.dispatch.accounts import jwt_expiry
from proxy.models import Account, AccountStatus, Fingerprint
from proxy.models_catalog import entries_from_models_payload, normalise_upstream_entry
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_replace

logger = logging.getLogger(__name__)
TIMEOUT_SECONDS = (10, 30)


@dataclass
class RefreshReport:
    refreshed: dict[str, int] = field(default_factory=dict)  # plan -> models fetched
    kept: list[str] = field(default_factory=list)  # plans whose previous snapshot was kept
    removed: list[str] = field(default_factory=list)


def _fingerprint() -> dict:
    row = Fingerprint.objects.filter(id=Fingerprint.CURRENT_ID).values().first()
    return row or dict(settings.CODEX_FINGERPRINT)


def _headers(account: Account, fingerprint: dict) -> dict[str, str]:
    user_agent = (
        fingerprint["user_agent_template"]
        .replace("{version}", fingerprint["app_version"])
        .replace("{platform}", fingerprint["platform"])
        .replace("{arch}", fingerprint["arch"])
    )
    headers = {"authorization": f"Bearer {account.access_token}"}
    if account.chatgpt_account_id:
        headers["chatgpt-account-id"] = account.chatgpt_account_id
    headers.update(
        {
            "originator": fingerprint["originator"],
            "user-agent": user_agent,
            "sec-ch-ua": f'"Chromium";v="{fingerprint["chromium_version"]}", "Not:A-Brand";v="24"',
            "accept": "application/json",
            "accept-encoding": "gzip, deflate",
            "x-codex-installation-id": identity.installation_id(account.id),
        }
    )
    return headers


def _candidate_urls(app_version: str) -> list[tuple[str, dict]]:
    base = settings.CODEX_UPSTREAM_BASE
    return [
        (f"{base}/codex/models", {"client_version": app_version}),
        (f"{base}/models", {}),
        (f"{base}/sentinel/chat-requirements", {}),
    ]


def fetch_models(account: Account, fingerprint: dict, session: requests.Session) -> list[dict]:
    """The normalised entries offered to ``account``; empty when no endpoint yields any."""
    for url, params in _candidate_urls(fingerprint["app_version"]):
        try:
            response = session.get(
                url, params=params, headers=_headers(account, fingerprint), timeout=TIMEOUT_SECONDS
            )
        except requests.RequestException as error:
            logger.warning(
                "model fetch for plan account %s failed: %s", account.id, type(error).__name__
            )
            continue
        if response.status_code != 200:
            continue
        try:
            payload = response.json()
        except ValueError:
            continue
        entries = [normalise_upstream_entry(raw) for raw in entries_from_models_payload(payload)]
        entries = [entry for entry in entries if entry]
        if entries:
            return entries
    return []


def _one_account_per_plan(now: datetime) -> dict[str, Account]:
    picked: dict[str, Account] = {}
    for account in Account.objects.filter(status=AccountStatus.ACTIVE).order_by("added_at", "id"):
        if not account.plan_type or account.plan_type in picked:
            continue
        expiry = account.access_token_expires_at or jwt_expiry(account.access_token)
        if expiry is None or expiry <= now:
            continue
        if account.cloudflare_cooldown_until and account.cloudflare_cooldown_until > now:
            continue
        picked[account.plan_type] = account
    return picked


def models_refresh(*, now: datetime) -> RefreshReport:
    """Fetch each plan's models and replace the snapshot hash atomically."""
    report = RefreshReport()
    previous = model_snapshots_get_all()
    fingerprint = _fingerprint()
    snapshots: dict[str, dict] = {}
    with requests.Session() as session:
        session.trust_env = False
        for plan, account in _one_account_per_plan(now).items():
            entries = fetch_models(account, fingerprint, session)
            if entries:
                snapshots[plan] = {"models": entries, "fetchedAt": now.isoformat()}
                report.refreshed[plan] = len(entries)
            elif plan in previous:
                snapshots[plan] = previous[plan]
                report.kept.append(plan)
    # A plan whose accounts are all ineligible right now keeps its snapshot; a plan no account
    # has any more disappears.
    plans_in_pool = set(
        Account.objects.exclude(plan_type=None).values_list("plan_type", flat=True).distinct()
    )
    for plan in set(previous) - set(snapshots):
        if plan in plans_in_pool:
            snapshots[plan] = previous[plan]
            report.kept.append(plan)
    report.removed = sorted(set(previous) - set(snapshots))
    if snapshots or previous:
        model_snapshots_replace(snapshots)
    return report
