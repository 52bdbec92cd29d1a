"""What the ledger's tokens would cost at OpenAI's list prices (codex-proxy spec §7.4).

Display only: a cost is computed when it is shown, from the facts' own token columns, and is
never stored. Prices are USD per million tokens, in ``PRICES`` below (the one place to change
them); a model is matched after normalising its name: lowercase, path prefixes stripped
(``models/``, ``publishers/google/models/``…), Codex names mapped by substring, then the
longest matching prefix of the table wins; anything unknown is priced 1 in / 2 out.

A request's cost = (uncached input × input price + cached × cache-read price + output × output
price) / 1e6 × the tier multiplier. Cached tokens are at most the input tokens and are taken out
of the input only when the model has a cache-read price. Service tier ``priority`` / ``fast``
uses the priority prices (multiplier 1) where the model has them, else multiplier 2; ``flex``
×0.5; anything else ×1. A request with more than 272,000 input tokens uses the long-context
prices where the model has them. ``original`` is the cost before the multiplier.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

LONG_CONTEXT_INPUT_TOKENS = 272_000
PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Rates:
    input: float
    output: float
    cache_read: float | None = None


@dataclass(frozen=True)
class ModelPrices:
    standard: Rates
    priority: Rates | None = None
    long_context: Rates | None = None
    long_context_priority: Rates | None = None


def _prices(
    input_price: float,
    output_price: float,
    cache: float | None = None,
    *,
    priority: tuple[float, float, float | None] | None = None,
    long: tuple[float, float, float | None] | None = None,
    long_priority: tuple[float, float, float | None] | None = None,
) -> ModelPrices:
    return ModelPrices(
        standard=Rates(input_price, output_price, cache),
        priority=Rates(*priority) if priority else None,
        long_context=Rates(*long) if long else None,
        long_context_priority=Rates(*long_priority) if long_priority else None,
    )


# USD per 1M tokens (spec §7.4's table).
PRICES: dict[str, ModelPrices] = {
    "gpt-5.5-pro": _prices(
        30, 180, priority=(75, 450, None), long=(60, 270, None), long_priority=(150, 675, None)
    ),
    "gpt-5.5": _prices(
        5, 30, 0.5, priority=(12.5, 75, 1.25), long=(10, 45, 1), long_priority=(25, 112.5, 2.5)
    ),
    "gpt-5.4-pro": _prices(
        30, 180, priority=(75, 450, None), long=(60, 270, None), long_priority=(150, 675, None)
    ),
    "gpt-5.4-mini": _prices(0.75, 4.5, 0.075),
    "gpt-5.4-nano": _prices(0.2, 1.25, 0.02),
    "gpt-5.4": _prices(
        2.5, 15, 0.25, priority=(5, 30, 0.5), long=(5, 22.5, 0.5), long_priority=(10, 45, 1)
    ),
    "gpt-5.3-codex-spark": _prices(1.25, 10, 0.125, priority=(2.5, 20, 0.25)),
    "gpt-5.3-codex": _prices(1.75, 14, 0.175, priority=(3.5, 28, 0.35)),
    "gpt-5.2": _prices(1.75, 14, 0.175, priority=(3.5, 28, 0.35)),
    "gpt-4o-mini": _prices(0.15, 0.6),
    "gpt-4o": _prices(2.5, 10),
    "gpt-4-turbo": _prices(10, 30),
    "gpt-4": _prices(30, 60),
    "gpt-3.5-turbo": _prices(0.5, 1.5),
    "claude-opus-4-5": _prices(5, 25),
    "claude-opus-4-6": _prices(5, 25),
    "claude-opus-4-7": _prices(5, 25),
    "claude-opus": _prices(15, 75),
    "claude-sonnet": _prices(3, 15),
    "claude-3-5-haiku": _prices(1, 5),
    "claude-haiku": _prices(0.25, 1.25),
    "claude": _prices(3, 15),
    "gemini-3.1-pro": _prices(2, 12),
}
DEFAULT_PRICES = _prices(1, 2)

_PATH_PREFIX = re.compile(r"^(?:.*/)?models/")


@functools.lru_cache(maxsize=1024)
def normalised_model(model: str | None) -> str:
    """The price-table name of ``model`` (before the prefix match)."""
    name = (model or "").strip().lower()
    name = _PATH_PREFIX.sub("", name)
    if "/" in name:
        name = name.rsplit("/", 1)[1]
    for marker, target in (
        ("gpt-5.5-pro", "gpt-5.5-pro"),
        ("gpt-5.5", "gpt-5.5"),
        ("gpt-5.4-mini", "gpt-5.4-mini"),
        ("gpt-5.4-nano", "gpt-5.4-nano"),
        ("gpt-5.4-pro", "gpt-5.4-pro"),
        ("gpt-5.4", "gpt-5.4"),
        ("gpt-5.2", "gpt-5.2"),
        ("gpt-5.3-codex-spark", "gpt-5.3-codex-spark"),
        ("gpt-5.3", "gpt-5.3-codex"),
        ("codex-auto-review", "gpt-5.4"),
        ("codex", "gpt-5.3-codex"),
        ("gpt-5", "gpt-5.4"),
    ):
        if marker in name:
            return target
    name = name.replace("claude-opus-4.", "claude-opus-4-").replace("claude-3.5-", "claude-3-5-")
    return name


@functools.lru_cache(maxsize=1024)
def prices_for(model: str | None) -> tuple[str, ModelPrices]:
    """(the table entry's name, its prices); the longest matching prefix wins."""
    name = normalised_model(model)
    best = None
    for entry in PRICES:
        if name.startswith(entry) and (best is None or len(entry) > len(best)):
            best = entry
    if best is None:
        return "default", DEFAULT_PRICES
    return best, PRICES[best]


@dataclass(frozen=True)
class Cost:
    priced_as: str
    input_cost: float
    output_cost: float
    cache_read_cost: float
    total: float
    original: float  # before the tier multiplier
    rates: Rates
    multiplier: float
    service_tier: str  # "priority" | "flex" | "default"


def tier_of(service_tier: str | None) -> str:
    tier = (service_tier or "").strip().lower()
    if tier in ("priority", "fast"):
        return "priority"
    if tier == "flex":
        return "flex"
    return "default"


def request_cost(
    *,
    model: str | None,
    service_tier: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cached_tokens: int | None,
) -> Cost:
    """The cost of one request (or of requests of one model, tier and context size added up:
    the formula is linear once ``cached`` is capped per request)."""
    priced_as, prices = prices_for(model)
    tier = tier_of(service_tier)
    input_count = max(0, input_tokens or 0)
    cached = min(max(0, cached_tokens or 0), input_count)
    output = max(0, output_tokens or 0)
    long_context = input_count > LONG_CONTEXT_INPUT_TOKENS
    return tokens_cost(
        priced_as=priced_as,
        prices=prices,
        tier=tier,
        long_context=long_context,
        input_tokens=input_count,
        cached_tokens=cached,
        output_tokens=output,
    )


def effective_rates(prices: ModelPrices, *, tier: str, long_context: bool) -> tuple[Rates, float]:
    """The rates a request of ``tier`` (``tier_of``) and context size is priced at, and the
    multiplier applied to what they give (SQL that prices rows one by one uses these too)."""
    multiplier = 1.0
    rates = prices.long_context if long_context and prices.long_context else prices.standard
    if tier == "priority":
        priority = prices.long_context_priority if long_context else prices.priority
        if priority is not None:
            rates = priority
        else:
            multiplier = 2.0
    elif tier == "flex":
        multiplier = 0.5
    return rates, multiplier


def tokens_cost(
    *,
    priced_as: str,
    prices: ModelPrices,
    tier: str,
    long_context: bool,
    input_tokens: int,
    cached_tokens: int,
    output_tokens: int,
) -> Cost:
    """The cost of token sums already capped (``cached_tokens`` ≤ ``input_tokens``)."""
    rates, multiplier = effective_rates(prices, tier=tier, long_context=long_context)
    if rates.cache_read is not None:
        uncached = input_tokens - cached_tokens
        cache_read_cost = cached_tokens * rates.cache_read / PER_MILLION
    else:
        uncached = input_tokens
        cache_read_cost = 0.0
    input_cost = uncached * rates.input / PER_MILLION
    output_cost = output_tokens * rates.output / PER_MILLION
    original = input_cost + output_cost + cache_read_cost
    return Cost(
        priced_as=priced_as,
        input_cost=input_cost * multiplier,
        output_cost=output_cost * multiplier,
        cache_read_cost=cache_read_cost * multiplier,
        total=original * multiplier,
        original=original,
        rates=rates,
        multiplier=multiplier,
        service_tier=tier,
    )
