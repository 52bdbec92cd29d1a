"""The model refresh (spec §4.5): one eligible account per plan asks the upstream which models
it offers; the plan snapshots in Redis are replaced as a whole.

Runs in the Celery worker; the fetches go through the Codex client on one event loop
(``run_coroutine``), after the ORM reads and before the ORM writes. The account of each plan
is chosen by the scheduler (the rotation strategy, with a concurrency slot held during the
fetch and released without counting a request), so the refresh never pushes a busy account
past its limit. A plan
whose fetch fails or returns nothing keeps its previous snapshot; plans no account has any more
disappear.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

from proxy.accounts import AccountView, ineligibility
from proxy.background import run_coroutine
from proxy.clients import codex
from proxy.domain.slots import SchedulerSettings, Slot
from proxy.models import Account
from proxy.models_catalog import entries_from_models_payload, normalise_upstream_entry
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_update
from proxy.scheduling import scheduler
from proxy.scheduling.ranking import rank
from proxy.services.upkeep_accounts import (
    current_fingerprint,
    current_scheduler_settings,
    pool_account_views,
)

logger = logging.getLogger(__name__)


@dataclass
class RefreshReport:
    refreshed: dict[str, int] = field(default_factory=dict)  # plan -> models fetched
    kept: list[str] = field(default_factory=list)  # plans whose previous snapshot was kept
    removed: list[str] = field(default_factory=list)
    # Plans with an account that may serve now (0: nothing to ask, the hourly run will).
    plans_available: int = 0


def model_headers(account, fingerprint: dict) -> list[tuple[str, str]]:
    """The models call's headers for ``account``: the Codex client's one header builder."""
    return codex.build_headers(
        codex.Call.MODELS,
        fingerprint=codex.render_fingerprint(fingerprint),
        credentials=codex.Credentials.of(account),
    )


async def fetch_models(account, fingerprint: dict) -> list[dict]:
    """The normalised entries offered to ``account``; empty when no endpoint yields any."""
    headers = model_headers(account, fingerprint)
    async for answer in codex.models(headers=headers, app_version=fingerprint["app_version"]):
        if answer.status == 0:
            logger.warning(
                "model fetch for plan account %s failed: %s", account.id, answer.body.decode()
            )
            continue
        if answer.status != 200:
            continue
        try:
            payload = json.loads(answer.body)
        except ValueError:
            continue
        normalised = [normalise_upstream_entry(raw) for raw in entries_from_models_payload(payload)]
        entries = [entry for entry in normalised if entry]
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
        ranking = rank(accounts, scheduler_settings.strategy)
        _, slot, _ = await scheduler.order_and_acquire(ranking, scheduler_settings)
        if slot is not None:
            slots[plan] = slot
    return slots


async def _fetch_per_plan(
    groups: dict[str, list[AccountView]], scheduler_settings: SchedulerSettings, fingerprint: dict
) -> dict[str, list[dict]]:
    """plan → the entries its slot's account was offered (empty: nothing usable)."""
    slots = await _slots_per_plan(groups, scheduler_settings)
    try:
        return {plan: await fetch_models(slot.account, fingerprint) for plan, slot in slots.items()}
    finally:
        for slot in slots.values():
            await scheduler.release(slot)  # no request is counted for a model fetch


def models_refresh(*, now: datetime) -> RefreshReport:
    """Fetch each plan's models and replace the snapshot hash atomically."""
    report = RefreshReport()
    previous = model_snapshots_get_all()
    fingerprint = current_fingerprint()
    snapshots: dict[str, dict] = {}
    groups = _eligible_by_plan(now)
    report.plans_available = len(groups)
    fetched = run_coroutine(_fetch_per_plan(groups, current_scheduler_settings(), fingerprint))
    for plan, entries in fetched.items():
        if entries:
            snapshots[plan] = {"models": entries, "fetchedAt": now.isoformat()}
            report.refreshed[plan] = len(entries)
        elif plan in previous:
            snapshots[plan] = previous[plan]
            report.kept.append(plan)
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
