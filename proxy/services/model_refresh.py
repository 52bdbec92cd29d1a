"""The model refresh (spec §4.5): one eligible account per plan asks the upstream which models
it offers; the plan snapshots in Redis are replaced as a whole.

Runs in the Celery worker (synchronous ``requests``). The account of each plan is chosen by the
scheduler (the rotation strategy, with a concurrency slot held during the fetch and released
without counting a request), so the refresh never pushes a busy account past its limit. A plan
whose fetch fails or returns nothing keeps its previous snapshot; plans no account has any more
disappear.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import requests

from proxy import identity
from proxy.background import run_coroutine
from proxy.clients import codex
from proxy.dispatch import scheduler
from proxy.dispatch.accounts import AccountView, ineligibility
from proxy.dispatch.scheduler import SchedulerSettings, Slot
from proxy.dispatch.upstream_request import render_fingerprint
from proxy.models import Account
from proxy.models_catalog import entries_from_models_payload, normalise_upstream_entry
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_update
from proxy.services.upkeep_accounts import (
    current_fingerprint,
    current_scheduler_settings,
    pool_account_views,
)

logger = logging.getLogger(__name__)
TIMEOUT_SECONDS = (10, 30)


@dataclass
class RefreshReport:
    refreshed: dict[str, int] = field(default_factory=dict)  # plan -> models fetched
    kept: list[str] = field(default_factory=list)  # plans whose previous snapshot was kept
    removed: list[str] = field(default_factory=list)
    # Plans with an account that may serve now (0: nothing to ask, the hourly run will).
    plans_available: int = 0


def _headers(account: AccountView, fingerprint: dict) -> dict[str, str]:
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


def fetch_models(account: AccountView, fingerprint: dict, session: requests.Session) -> list[dict]:
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


def _eligible_by_plan(now: datetime) -> dict[str, list[AccountView]]:
    """The accounts that may serve right now, grouped by plan (insertion order kept)."""
    groups: dict[str, list[AccountView]] = {}
    for account in pool_account_views(now=now):
        if account.plan_type and ineligibility(account, now=now) is None:
            groups.setdefault(account.plan_type, []).append(account)
    return groups


async def _slots_per_plan(
    groups: dict[str, list[AccountView]], scheduler_settings: SchedulerSettings
) -> dict[str, Slot]:
    """One slot per plan, on the account the rotation strategy puts first among those with a
    free slot; a plan whose accounts are all at their limit gets none this time."""
    slots: dict[str, Slot] = {}
    for plan, accounts in groups.items():
        ranking = scheduler.rank(accounts, scheduler_settings.strategy)
        _, slot = await scheduler.order_and_acquire(ranking, scheduler_settings)
        if slot is not None:
            slots[plan] = slot
    return slots


async def _release(slots: list[Slot]) -> None:
    for slot in slots:
        await scheduler.release(slot)  # no request is counted for a model fetch


def models_refresh(*, now: datetime) -> RefreshReport:
    """Fetch each plan's models and replace the snapshot hash atomically."""
    report = RefreshReport()
    previous = model_snapshots_get_all()
    fingerprint = current_fingerprint()
    snapshots: dict[str, dict] = {}
    groups = _eligible_by_plan(now)
    report.plans_available = len(groups)
    slots = run_coroutine(_slots_per_plan(groups, current_scheduler_settings()))
    try:
        with requests.Session() as session:
            session.trust_env = False
            session.headers.clear()  # only the fingerprint's headers, in its order
            for plan, slot in slots.items():
                entries = fetch_models(slot.account, fingerprint, session)
                if entries:
                    snapshots[plan] = {"models": entries, "fetchedAt": now.isoformat()}
                    report.refreshed[plan] = len(entries)
                elif plan in previous:
                    snapshots[plan] = previous[plan]
                    report.kept.append(plan)
    finally:
        run_coroutine(_release(list(slots.values())))
    # A plan whose accounts are all ineligible right now keeps its snapshot; a plan no account
    # has any more disappears. "Keeps" is decided against the hash as it is when written
    # (another writer may have stored a plan while the fetches ran), in one atomic update.
    plans_in_pool = set(
        Account.objects.exclude(plan_type=None).values_list("plan_type", flat=True).distinct()
    )

    def merged(current: dict[str, dict]) -> dict[str, dict]:
        wanted = dict(snapshots)
        for plan in set(current) - set(snapshots):
            if plan in plans_in_pool:
                wanted[plan] = current[plan]
        return wanted

    fetched_or_failed = set(snapshots)
    written = model_snapshots_update(merged)
    kept = sorted(set(written) - fetched_or_failed)
    report.kept.extend(plan for plan in kept if plan not in report.kept)
    report.removed = sorted(set(previous) - set(written))
    return report
