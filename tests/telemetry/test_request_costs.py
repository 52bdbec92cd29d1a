"""The dearest usage row, priced in PostgreSQL (``telemetry/queries/request_costs.py``): the
same figure ``telemetry.billing.request_cost`` gives that row in Python, for every price branch
(tiers, long context, cached tokens with and without a cache price, NULL tokens, a model the
table does not know), and only the rows asked about — over all of them, or model by model in
one grouped query (a key's allowed models, before its request's body names one)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from telemetry.billing import request_cost
from telemetry.models import UsageRecord
from telemetry.queries.request_costs import highest_request_cost, highest_request_cost_per_model
from telemetry.services.ledger import usage_record_create

T0 = datetime(2026, 11, 1, 10, 7, 30, tzinfo=UTC)

ROWS = [
    # model, service tier, input, output, cached
    ("gpt-5.4", None, 1000, 5000, 0),
    ("gpt-5.4", " Priority ", 1000, 5000, 400),  # priority prices (trimmed, any case)
    ("gpt-5.4", "fast", 300_000, 10, 0),  # long context, priority
    ("gpt-5.4", "flex", 300_000, 10, 290_000),  # long context, half price, cached
    ("gpt-4o", "priority", 1000, 5000, 900),  # no priority prices: × 2; no cache price
    ("gpt-5.5", "default", 100_000, 2000, 200_000),  # cached more than the input: capped
    ("my-own-model", None, 7000, 3000, 0),  # unknown: 1 in / 2 out
    ("gpt-5.4", None, None, None, None),  # a row without usage
]


def _row(model, tier, input_tokens, output_tokens, cached_tokens) -> UsageRecord:
    return usage_record_create(
        created_at=T0,
        account_id="acct_a",
        model=model,
        message="v1 responses completed",
        client_api_key_id="key_a",
        service_tier=tier,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in ROWS])
def test_a_rows_price_in_sql_is_its_price_in_python(row):
    _row(*row)
    model, tier, input_tokens, output_tokens, cached = row

    priced = highest_request_cost(UsageRecord.objects.all())

    expected = request_cost(
        model=model,
        service_tier=tier,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached,
    ).total
    assert priced == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.django_db
def test_the_highest_is_the_dearest_row_of_the_ones_asked_about():
    for row in ROWS:
        _row(*row)
    costs = {
        row: request_cost(
            model=row[0],
            service_tier=row[1],
            input_tokens=row[2],
            output_tokens=row[3],
            cached_tokens=row[4],
        ).total
        for row in ROWS
    }
    gpt_54 = UsageRecord.objects.filter(model="gpt-5.4")

    assert highest_request_cost(UsageRecord.objects.all()) == pytest.approx(max(costs.values()))
    assert highest_request_cost(gpt_54, models=["gpt-5.4"]) == pytest.approx(
        max(cost for row, cost in costs.items() if row[0] == "gpt-5.4")
    )
    assert highest_request_cost(UsageRecord.objects.filter(model="nobody")) is None


@pytest.mark.django_db
def test_the_highest_per_model_is_each_models_dearest_row_in_one_query(
    django_assert_num_queries,
):
    for row in ROWS:
        _row(*row)
    dearest: dict[str, float] = {}
    for model, tier, input_tokens, output_tokens, cached in ROWS:
        cost = request_cost(
            model=model,
            service_tier=tier,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached,
        ).total
        dearest[model] = max(dearest.get(model, 0.0), cost)

    with django_assert_num_queries(1):
        priced = highest_request_cost_per_model(
            UsageRecord.objects.all(), ["gpt-5.4", "gpt-5.5", "my-own-model", "nobody"]
        )

    assert priced.keys() == {"gpt-5.4", "gpt-5.5", "my-own-model"}  # "nobody" has no rows
    for model, cost in priced.items():
        assert cost == pytest.approx(dearest[model], rel=1e-12)
    assert highest_request_cost_per_model(UsageRecord.objects.all(), []) == {}
