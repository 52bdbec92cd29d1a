"""An account's policy (issue 25 item 5): ``GET /api/admin/accounts/policy?id=`` (its daily
burn cap and today's burn against it), ``PUT`` (replace it; ``dailyBurnCapTokens`` null or left
out = no cap, which removes the policy) and ``DELETE`` (uncapped)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema

from proxy.admin_api.display import china_iso
from proxy.admin_api.envelope import bad_request, ok
from proxy.admin_api.schema import ANY_DATA, query
from proxy.admin_api.views.accounts import account_from_query
from proxy.admin_api.views.base import AdminAPIView
from proxy.daily_burn import daily_burns
from proxy.models import Account, AccountPolicy
from proxy.services.account_policies import (
    AccountPolicyInvalid,
    account_policy_delete,
    account_policy_set,
    daily_burn_cap_value,
)

FIELDS = ("dailyBurnCapTokens",)


def _answer(account: Account):
    now = timezone.now()
    policy = AccountPolicy.objects.filter(account=account).first()
    return ok(
        {
            "accountId": account.pk,
            "policy": None
            if policy is None
            else {
                "dailyBurnCapTokens": policy.daily_burn_cap_tokens,
                "updatedAt": policy.updated_at.isoformat(),
            },
            "dailyBurn": daily_burns([account.pk], now=now)[account.pk].as_item(iso=china_iso),
        }
    )


class AccountPolicyView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="An account's policy (its daily burn cap) and today's burn (policy null: none)",
        parameters=[query("id", "The account's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        return _answer(account_from_query(request))

    @extend_schema(
        tags=["accounts"],
        summary="Replace an account's policy (dailyBurnCapTokens null or left out: no cap)",
        parameters=[query("id", "The account's id", required=True)],
        request=ANY_DATA,
        responses={200: ANY_DATA},
    )
    def put(self, request):
        account = account_from_query(request)
        body = self.json_object(request)
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise bad_request(f"{unknown[0]} is not a policy field")
        try:
            cap = daily_burn_cap_value(body.get("dailyBurnCapTokens"))
        except AccountPolicyInvalid as invalid:
            raise bad_request(f"dailyBurnCapTokens {invalid.reason}") from None
        account_policy_set(account=account, daily_burn_cap_tokens=cap, now=timezone.now())
        return _answer(account)

    @extend_schema(
        tags=["accounts"],
        summary="Remove an account's policy (uncapped again)",
        parameters=[query("id", "The account's id", required=True)],
        responses={200: ANY_DATA},
    )
    def delete(self, request):
        account = account_from_query(request)
        account_policy_delete(account=account)
        return _answer(account)
