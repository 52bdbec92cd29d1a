"""What a request of a key with a budget reserves of it while it runs (``counters``).

**The bound.** A request is admitted while the key's spend plus the reservations of its
requests in flight is under the budget, and it then reserves its estimate until it is settled
to its real cost. So whenever each request costs no more than its estimate, the key's spend
passes its budget by less than the cost of the last request admitted: one request's cost. A
request that costs more than its estimate passes it by at most the difference more.

**The estimate** is the largest of

* the body's input at the model's price (``body_estimate_micro``): ``body bytes / 4`` tokens
  (about what a tokenizer makes of English text and JSON; an image's base64 counts more than
  it costs), uncached, with the service tier's multiplier — the part the request shows;
* the key's high-water: its most expensive request in its current budget window (the UTC day
  with a daily budget, else the month), from its usage rows, then raised by every settlement —
  never lowered by cheaper ones, so a burst after many cheap requests reserves what the key's
  dear ones cost;
* the model's prior: the pool's most expensive request of that model in the last 7 days, all
  keys together (``cost_history``), raised by settlements too — what a key with no history of
  its own reserves. With no request of the model in the pool in those 7 days the prior is
  ``default_estimate_micro``: the body's input plus ``KEY_BUDGET_DEFAULT_OUTPUT_TOKENS`` output
  tokens at the model's price.

The output is what a body cannot show (the Codex upstream refuses ``max_output_tokens``, so
nothing bounds it in advance), nor a continuation's stored history (``previous_response_id``):
the history-based parts stand for them.

An estimate never refuses a request that fits: with nothing else of its key in flight a
request is admitted whenever the spend is under the budget. Estimates only limit how many
requests run side by side near the budget's end.
"""

from __future__ import annotations

from django.conf import settings

from proxy.dispatch.types import DispatchRequest
from telemetry.billing import request_cost

# Bytes of a request body per input token.
BODY_BYTES_PER_TOKEN = 4


def _micro_cost(request: DispatchRequest, *, output_tokens: int) -> int:
    tier = request.body.get("service_tier")
    cost = request_cost(
        model=request.model,
        service_tier=tier if isinstance(tier, str) else None,
        input_tokens=request.body_bytes // BODY_BYTES_PER_TOKEN,
        output_tokens=output_tokens,
        cached_tokens=0,
    )
    return round(cost.total * 1_000_000)


def body_estimate_micro(request: DispatchRequest) -> int:
    """What ``request``'s body alone will cost as input, in micro-USD."""
    return _micro_cost(request, output_tokens=0)


def default_estimate_micro(request: DispatchRequest) -> int:
    """The prior of a model the pool has no history of: the body's input and
    ``KEY_BUDGET_DEFAULT_OUTPUT_TOKENS`` output tokens, in micro-USD."""
    return _micro_cost(request, output_tokens=settings.KEY_BUDGET_DEFAULT_OUTPUT_TOKENS)
