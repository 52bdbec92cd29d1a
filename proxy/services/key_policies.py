"""Writes of ``client_api_key_policies`` (issue 25): set a key's policy, remove it.

The checks live here so the admin API and the console refuse the same things. A change takes
effect on the key's next request (the policy is read with the key on every request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction

from proxy.models import ClientApiKey, ClientApiKeyPolicy

LARGEST_COUNT = 10**9
LARGEST_BUDGET_USD = Decimal("99999999")  # numeric(12, 4)
MOST_ALLOWED_MODELS = 200
LONGEST_MODEL_NAME = 200
ACCOUNT_GROUP = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
COUNT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")
BUDGET_FIELDS = ("daily_budget_usd", "monthly_budget_usd")
POLICY_FIELDS = (*COUNT_FIELDS, *BUDGET_FIELDS, "allowed_models", "account_group")


class PolicyInvalid(ValueError):
    """A value no policy may hold: ``field`` (its snake_case name) and ``reason`` (safe to
    show, worded to follow the field's name)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class PolicyValues:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    daily_budget_usd: Decimal | None = None
    monthly_budget_usd: Decimal | None = None
    allowed_models: list[str] | None = None
    account_group: str | None = None


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyInvalid(name, "must be a whole number or null")
    if not 1 <= value <= LARGEST_COUNT:
        raise PolicyInvalid(name, f"must be between 1 and {LARGEST_COUNT}")
    return value


def _budget(name: str, value: Any) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise PolicyInvalid(name, "must be a number of US dollars or null")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise PolicyInvalid(name, "must be a number of US dollars or null") from None
    if not amount.is_finite() or not Decimal("0.0001") <= amount <= LARGEST_BUDGET_USD:
        raise PolicyInvalid(name, f"must be between 0.0001 and {LARGEST_BUDGET_USD}")
    if amount != amount.quantize(Decimal("0.0001")):
        raise PolicyInvalid(name, "has more than 4 decimal places")
    return amount


def _models(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise PolicyInvalid("allowed_models", "must be a non-empty list of model names or null")
    if len(value) > MOST_ALLOWED_MODELS:
        raise PolicyInvalid("allowed_models", f"holds at most {MOST_ALLOWED_MODELS} names")
    names: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip() or len(item) > LONGEST_MODEL_NAME:
            raise PolicyInvalid(
                "allowed_models",
                f"entries must be model names of 1 to {LONGEST_MODEL_NAME} characters",
            )
        if item.strip() not in names:
            names.append(item.strip())
    return names


def _group(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not ACCOUNT_GROUP.match(value):
        raise PolicyInvalid("account_group", "must be 1 to 64 of A-Z a-z 0-9 _ . - or null")
    return value


def policy_values(raw: dict[str, Any]) -> PolicyValues:
    """The checked values of ``raw`` (field name → value; missing = null). Raises
    PolicyInvalid."""
    unknown = set(raw) - set(POLICY_FIELDS)
    if unknown:
        raise PolicyInvalid(", ".join(sorted(unknown)), "is not a policy field")
    limits: dict[str, Any] = {name: _count(name, raw.get(name)) for name in COUNT_FIELDS}
    limits.update({name: _budget(name, raw.get(name)) for name in BUDGET_FIELDS})
    return PolicyValues(
        **limits,
        allowed_models=_models(raw.get("allowed_models")),
        account_group=_group(raw.get("account_group")),
    )


@transaction.atomic
def key_policy_set(*, key: ClientApiKey, values: PolicyValues, now: datetime) -> ClientApiKeyPolicy:
    """Create or replace the policy of ``key`` (every field; null = unlimited)."""
    policy, _ = ClientApiKeyPolicy.objects.update_or_create(
        key=key, defaults={**values.__dict__, "updated_at": now}
    )
    return policy


def key_policy_delete(*, key: ClientApiKey) -> bool:
    """Remove the policy of ``key`` (it becomes unlimited); False when it had none."""
    deleted, _ = ClientApiKeyPolicy.objects.filter(key=key).delete()
    return deleted > 0
