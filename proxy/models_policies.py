"""``client_api_key_policies`` — seed 004 §8's extension path for per-key limits ("新表
``client_api_key_policies (key_id FK, …)``; 运行态计数走 Redis"). One row per key (the key id
is the primary key and a foreign key, ON DELETE CASCADE); a key without a row is unlimited, and
every limit left NULL is unlimited. The counters live in Redis (``proxy.policies``), the spend
is computed from ``usage_records`` with telemetry's price table (no amount is stored, seed §2).

``account_policies`` — the same path for an upstream account's limits: its daily burn cap.
"""

from django.db import models
from django.db.models import Q

from proxy.model_constraints import check as _check

POLICY_TABLE = "client_api_key_policies"


def _positive_or_null(column: str) -> models.CheckConstraint:
    return _check(
        POLICY_TABLE, column, Q(**{f"{column}__isnull": True}) | Q(**{f"{column}__gt": 0})
    )


class ClientApiKeyPolicy(models.Model):
    """The limits of one client key. ``allowed_models``: a JSON list of model names (aliases
    allowed, compared after alias resolution), NULL = every model. ``account_group``: the key
    may use only the accounts whose label carries the word ``group:<account_group>``."""

    key = models.OneToOneField(
        "proxy.ClientApiKey",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="policy",
    )
    requests_per_minute = models.BigIntegerField(null=True, blank=True)
    tokens_per_minute = models.BigIntegerField(null=True, blank=True)
    max_concurrent_requests = models.BigIntegerField(null=True, blank=True)
    daily_budget_usd = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    monthly_budget_usd = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    allowed_models = models.JSONField(null=True, blank=True)
    account_group = models.TextField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = POLICY_TABLE
        verbose_name = "key policy"
        verbose_name_plural = "key policy"
        constraints = [
            _positive_or_null("requests_per_minute"),
            _positive_or_null("tokens_per_minute"),
            _positive_or_null("max_concurrent_requests"),
            _positive_or_null("daily_budget_usd"),
            _positive_or_null("monthly_budget_usd"),
        ]

    def __str__(self) -> str:
        return f"policy of {self.key_id}"


ACCOUNT_POLICY_TABLE = "account_policies"


class AccountPolicy(models.Model):
    """Limits an operator sets on one upstream account (issue 25 item 5), on seed §8's
    extension path beside ``client_api_key_policies``: one row per account (the account id is
    the primary key and a foreign key, ON DELETE CASCADE); an account without a row is
    uncapped.

    ``daily_burn_cap_tokens``: input + output tokens the account may burn per UTC day; over it
    the account is not scheduled until 00:00 UTC. ``burn_day`` / ``burn_baseline_tokens``: the
    UTC day the baseline belongs to, and ``account_usage``'s input + output at that day's start
    (its lifetime counters minus the day's bucket tokens when computed), so today's burn is
    ``account_usage`` − baseline, which the pool snapshot's statement compares. Written by
    ``proxy.services.account_policies`` (set, and the roll every minute); a baseline of another
    day applies no cap."""

    account = models.OneToOneField(
        "proxy.Account",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="policy",
    )
    daily_burn_cap_tokens = models.BigIntegerField()
    burn_day = models.DateField(null=True, blank=True)
    burn_baseline_tokens = models.BigIntegerField(db_default=0)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = ACCOUNT_POLICY_TABLE
        verbose_name = "account policy"
        verbose_name_plural = "account policy"
        constraints = [
            _check(ACCOUNT_POLICY_TABLE, "daily_burn_cap_tokens", Q(daily_burn_cap_tokens__gt=0)),
        ]

    def __str__(self) -> str:
        return f"policy of {self.account_id}"
