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
from proxy.clients import codex
from proxy.dispatch.accounts import ineligibility
from proxy.dispatch.upstream_request import render_fingerprint
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
    """The account's identity with the fingerprint's headers, in the fingerprint's order (the
    same rendering the request path uses, spec §2.2)."""
    rendered = render_fingerprint(fingerprint)
    values = {"authorization": f"Bearer {account.access_token}"}
    if account.chatgpt_account_id:
        values["chatgpt-account-id"] = account.chatgpt_account_id
    values["originator"] = rendered.originator
    values["x-codex-installation-id"] = identity.installation_id(account.id)
    values["user-agent"] = rendered.user_agent
    values["sec-ch-ua"] = rendered.sec_ch_ua
    for name, value in rendered.default_headers:
        values.setdefault(name.lower(), value)
    values["accept"] = "application/json"
    # requests decodes these itself; the fingerprint may name more (br, zstd) than it can.
    values["accept-encoding"] = "gzip, deflate"
    ordered = {name: values.pop(name) for name in rendered.order if name in values}
    return ordered | values


def fetch_models(account: Account, fingerprint: dict, session: requests.Session) -> list[dict]:
    """The normalised entries offered to ``account``; empty when no endpoint yields any."""
    headers = _headers(account, fingerprint)
    for url, params in codex.models_urls(fingerprint["app_version"]):
        try:
            response = session.get(url, params=params, headers=headers, timeout=TIMEOUT_SECONDS)
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
    """The first account (insertion order) of each plan that may serve right now."""
    picked: dict[str, Account] = {}
    for account in Account.objects.filter(status=AccountStatus.ACTIVE).order_by("added_at", "id"):
        if not account.plan_type or account.plan_type in picked:
            continue
        if ineligibility(account, now=now) is None:
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
        session.headers.clear()  # only the fingerprint's headers, in its order
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
