"""A client key's policy (issue 25): ``GET /api/admin/keys/policy?id=`` (the limits and the
key's use against them), ``PUT`` (replace every limit; a field left out is unlimited) and
``DELETE`` (no policy: unlimited). Field names are camelCase like the rest of the API."""

from __future__ import annotations

from decimal import Decimal

from django.utils import timezone
from drf_spectacular.utils import extend_schema

from proxy.admin_api.envelope import bad_request, not_found, ok
from proxy.admin_api.fields import required_query
from proxy.admin_api.schema import ANY_DATA, query
from proxy.admin_api.views.base import AdminAPIView
from proxy.models import ClientApiKey, ClientApiKeyPolicy
from proxy.policies.usage import key_policy_usage
from proxy.services.key_policies import (
    POLICY_FIELDS,
    PolicyInvalid,
    key_policy_delete,
    key_policy_set,
    policy_values,
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_API_NAMES = {_camel(name): name for name in POLICY_FIELDS}


def _dollars(value: Decimal | None) -> str | None:
    """A budget as a decimal string without trailing zeros ("5.25"), exact (no float)."""
    return None if value is None else format(Decimal(value).normalize(), "f")


def policy_item(policy: ClientApiKeyPolicy | None, *, now) -> dict | None:
    if policy is None:
        return None
    return {
        "requestsPerMinute": policy.requests_per_minute,
        "tokensPerMinute": policy.tokens_per_minute,
        "maxConcurrentRequests": policy.max_concurrent_requests,
        "dailyBudgetUsd": _dollars(policy.daily_budget_usd),
        "monthlyBudgetUsd": _dollars(policy.monthly_budget_usd),
        "allowedModels": policy.allowed_models,
        "accountGroup": policy.account_group,
        "updatedAt": policy.updated_at.isoformat(),
    }


def _answer(key: ClientApiKey, policy: ClientApiKeyPolicy | None):
    now = timezone.now()
    return ok(
        {
            "keyId": key.id,
            "policy": policy_item(policy, now=now),
            "usage": key_policy_usage(policy, now=now) if policy is not None else None,
        }
    )


class KeyPolicyView(AdminAPIView):
    def _key(self, request) -> ClientApiKey:
        key = ClientApiKey.objects.filter(pk=required_query(request, "id")).first()
        if key is None:
            raise not_found("Client key not found")
        return key

    @extend_schema(
        tags=["keys"],
        summary="A key's policy and its use against it (policy null: unlimited)",
        parameters=[query("id", "The key's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        key = self._key(request)
        return _answer(key, ClientApiKeyPolicy.objects.filter(key=key).first())

    @extend_schema(
        tags=["keys"],
        summary="Replace a key's policy (every limit; null or left out = unlimited)",
        parameters=[query("id", "The key's id", required=True)],
        request=ANY_DATA,
        responses={200: ANY_DATA},
    )
    def put(self, request):
        key = self._key(request)
        body = self.json_object(request)
        unknown = sorted(set(body) - set(_API_NAMES))
        if unknown:
            raise bad_request(f"{unknown[0]} is not a policy field")
        try:
            values = policy_values({_API_NAMES[name]: value for name, value in body.items()})
        except PolicyInvalid as invalid:
            raise bad_request(f"{_camel(invalid.field)} {invalid.reason}") from None
        return _answer(key, key_policy_set(key=key, values=values, now=timezone.now()))

    @extend_schema(
        tags=["keys"],
        summary="Remove a key's policy (unlimited again)",
        parameters=[query("id", "The key's id", required=True)],
        responses={200: ANY_DATA},
    )
    def delete(self, request):
        key = self._key(request)
        key_policy_delete(key=key)
        return _answer(key, None)
