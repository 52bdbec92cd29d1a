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

**Before the body** (issue 35 item 4: a request is admitted from its headers, ``early``) neither
the body nor the model is known. The reservation made then is the key's high-water and the
largest prior of the models the request may name: for a key with a list of allowed models (at
most ``BEFORE_BODY_MODELS_AT_MOST``) those models, else the model of the key's latest request
in this process (``recent_models``; none known: the high-water only) — a pool-wide prior would
make every request of a cheap model reserve what the pool's dearest model cost. A model with no
history counts ``KEY_BUDGET_DEFAULT_OUTPUT_TOKENS`` output tokens at its price
(``output_default_micro``; the input waits for the body). Once the body is read, the dispatch
computes the estimate above for its model and, when it is more than was reserved — or may be:
its model's prior was not read —, raises the reservation (``counters.confirm``: one more Lua
call, the budgets checked again), so the bound holds as for a request admitted after its body.
A reservation above the body's estimate (a dearer allowed model's, the key's previous model's)
is kept, not lowered: lowering it would cost that call on every such request.

An estimate never refuses a request that fits: with nothing else of its key in flight a
request is admitted whenever the spend is under the budget. Estimates only limit how many
requests run side by side near the budget's end.
"""

from __future__ import annotations

from django.conf import settings

from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.early_admission import EarlyAdmission
from proxy.domain.key_policy import KeyPolicy
from proxy.policies import recent_models
from proxy.policies.counters import MAX_RESERVATION_MICRO, NO_ESTIMATES, Estimates
from telemetry.billing import request_cost

# Bytes of a request body per input token.
BODY_BYTES_PER_TOKEN = 4
# Before the body, a key's allowed models' priors count when it has no more than this many
# (each is two keys of the admission's Lua call); a longer list reserves as for every model.
BEFORE_BODY_MODELS_AT_MOST = 16


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


def output_default_micro(model: str) -> int:
    """The part of ``model``'s default prior known before the body:
    ``KEY_BUDGET_DEFAULT_OUTPUT_TOKENS`` output tokens at its standard price, in micro-USD."""
    cost = request_cost(
        model=model,
        service_tier=None,
        input_tokens=0,
        output_tokens=settings.KEY_BUDGET_DEFAULT_OUTPUT_TOKENS,
        cached_tokens=0,
    )
    return round(cost.total * 1_000_000)


def estimates_after_body(request: DispatchRequest) -> Estimates:
    """What ``request`` brings to its reservation once its body is read: the body's input and
    its model's prior, or that model's default (above)."""
    if request.key_policy is None or not request.key_policy.has_budget:
        return NO_ESTIMATES
    return Estimates(
        own_micro=body_estimate_micro(request),
        models=(request.model,),
        defaults_micro=(default_estimate_micro(request),),
    )


def estimates_before_body(policy: KeyPolicy) -> Estimates:
    """What a request of ``policy``'s key brings to its reservation from its headers (beside
    the key's high-water, which the admission always counts): its allowed models' priors when
    it has a short list of them, else the prior of the model its latest request here named
    (``recent_models``), else nothing."""
    if not policy.has_budget:
        return NO_ESTIMATES
    allowed = policy.allowed_models
    if allowed and len(allowed) <= BEFORE_BODY_MODELS_AT_MOST:
        models = tuple(sorted(allowed))
    elif (latest := recent_models.latest(policy.key_id)) is not None:
        models = (latest,)
    else:
        return NO_ESTIMATES
    return Estimates(
        models=models, defaults_micro=tuple(output_default_micro(model) for model in models)
    )


def estimate_known_from(request: DispatchRequest, early: EarlyAdmission) -> int | None:
    """``request``'s estimate (micro-USD) from what ``early`` read of the high-waters, now that
    its body and model are known; None when its model's prior was not read (not one of the
    models counted before the body): only the Lua call knows it."""
    if not early.policy.has_budget:
        return 0
    model_high = early.model_highs.get(request.model)
    if model_high is None:
        return None
    prior = model_high if model_high > 0 else default_estimate_micro(request)
    estimate = max(body_estimate_micro(request), early.key_high_micro, prior)
    return min(estimate, MAX_RESERVATION_MICRO)
