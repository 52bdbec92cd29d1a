"""The most one usage row cost, priced row by row in PostgreSQL by ``telemetry.billing``'s
table (tier multipliers and long-context prices applied, as the usage pages' actual cost).

The price of a model is Python's (its name is matched by prefix there), so the SQL gets one
``CASE`` branch per model, tier and context size with that branch's rates as constants: one
aggregate over the rows, nothing fetched but the maximum.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import (
    Case,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Least, Lower, Trim

from telemetry.billing import LONG_CONTEXT_INPUT_TOKENS, PER_MILLION, effective_rates, prices_for

# ``tier_of`` in SQL: the service tier trimmed and lowercased; anything else is the default.
_PRIORITY_TIERS = ("priority", "fast")
_TIER_CONDITIONS = {
    "priority": Q(cost_tier__in=_PRIORITY_TIERS),
    "flex": Q(cost_tier="flex"),
    "default": ~Q(cost_tier__in=(*_PRIORITY_TIERS, "flex")),
}
_CONTEXT_CONDITIONS = {
    True: Q(cost_input__gt=LONG_CONTEXT_INPUT_TOKENS),
    False: Q(cost_input__lte=LONG_CONTEXT_INPUT_TOKENS),
}


def _priced_rows(records: QuerySet) -> QuerySet:
    """``records`` with the columns a row's price needs (NULL tokens count as 0, cached tokens
    at most the input, as ``request_cost`` takes them)."""
    return records.annotate(
        cost_tier=Lower(Trim(Coalesce("service_tier", Value("", output_field=TextField())))),
        cost_input=Coalesce("input_tokens", 0),
        cost_output=Coalesce("output_tokens", 0),
    ).annotate(cost_cached=Least(Coalesce("cached_tokens", 0), F("cost_input")))


def _row_cost_branches(model: str) -> list[When]:
    """One ``WHEN`` per tier and context size of ``model``: the row's cost in USD."""
    _, prices = prices_for(model)
    branches = []
    for tier, tier_condition in _TIER_CONDITIONS.items():
        for long_context, context_condition in _CONTEXT_CONDITIONS.items():
            rates, multiplier = effective_rates(prices, tier=tier, long_context=long_context)
            scale = multiplier / PER_MILLION
            if rates.cache_read is not None:
                cost = (
                    (F("cost_input") - F("cost_cached")) * Value(rates.input * scale)
                    + F("cost_cached") * Value(rates.cache_read * scale)
                    + F("cost_output") * Value(rates.output * scale)
                )
            else:
                cost = F("cost_input") * Value(rates.input * scale) + F("cost_output") * Value(
                    rates.output * scale
                )
            branches.append(
                When(
                    Q(model=model) & tier_condition & context_condition,
                    then=ExpressionWrapper(cost, output_field=FloatField()),
                )
            )
    return branches


def _row_cost(models: Iterable[str]) -> Case | None:
    """A row's cost (USD) as one ``CASE`` over ``models`` (None without models); 0 for a row of
    another model."""
    branches = [branch for model in sorted(set(models)) for branch in _row_cost_branches(model)]
    if not branches:
        return None
    return Case(*branches, default=Value(0.0), output_field=FloatField())


def highest_request_cost(records: QuerySet, *, models: Iterable[str] | None = None) -> float | None:
    """The cost (USD) of the most expensive row of ``records``, or None without rows.
    ``models``: the models the rows can have, when the caller knows them (else one more
    query finds them)."""
    if models is None:
        models = records.order_by().values_list("model", flat=True).distinct()
    cost = _row_cost(models)
    if cost is None:
        return None
    top = _priced_rows(records).aggregate(top=Max(cost))["top"]
    return None if top is None else float(top)


def highest_request_cost_per_model(records: QuerySet, models: Iterable[str]) -> dict[str, float]:
    """The cost (USD) of the most expensive row of each of ``models`` among ``records``, in one
    grouped query; a model without rows is left out."""
    models = sorted(set(models))
    cost = _row_cost(models)
    if cost is None:
        return {}
    rows = (
        _priced_rows(records.filter(model__in=models))
        .order_by()
        .values("model")
        .annotate(top=Max(cost))
        .values_list("model", "top")
    )
    return {model: float(top) for model, top in rows if top is not None}
