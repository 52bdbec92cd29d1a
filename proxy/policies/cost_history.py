"""What requests really cost, from ``usage_records``: the floors of a budget reservation's
estimate (``proxy.policies.estimate``). Both are maxima, not averages, so that an estimate
made from them is at least what any request of that history cost.

* the key's high-water — its most expensive request in its current budget window (index
  ``key_created``);
* a model's high-water in the pool — the most expensive request of that model over the
  last ``MODEL_HISTORY_DAYS`` days across every key (index ``model_created``): what a key
  with no history of its own can expect. Several models (a key's allowed models, before its
  request's body names one) in one grouped query.

Each runs only when its Redis copy is missing (``counters``): the key's once per budget
window (the settlements raise it since); a model's then, and again every
``MODEL_COST_REFRESH_SECONDS`` by one admission of the pool (its window slides).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from proxy.domain.key_policy import MICRO
from telemetry.models import UsageRecord
from telemetry.queries.request_costs import highest_request_cost, highest_request_cost_per_model

MODEL_HISTORY_DAYS = 7


def _micro(usd: float | None) -> int:
    return 0 if usd is None else round(usd * MICRO)


def key_highest_cost_micro(key_id: str, *, since: datetime, now: datetime) -> int:
    """The cost of ``key_id``'s most expensive request between ``since`` and ``now``, in
    micro-USD (0 without requests)."""
    records = UsageRecord.objects.filter(
        client_api_key_id=key_id, created_at__gte=since, created_at__lte=now
    )
    return _micro(highest_request_cost(records))


def pool_highest_costs_micro(models: Iterable[str], *, now: datetime) -> dict[str, int]:
    """For each of ``models``: the cost of the pool's most expensive request of it in the last
    ``MODEL_HISTORY_DAYS`` days, in micro-USD (0: the pool has no history of it). One query."""
    models = set(models)
    records = UsageRecord.objects.filter(
        created_at__gte=now - timedelta(days=MODEL_HISTORY_DAYS), created_at__lte=now
    )
    highest = highest_request_cost_per_model(records, models)
    return {model: _micro(highest.get(model)) for model in models}
