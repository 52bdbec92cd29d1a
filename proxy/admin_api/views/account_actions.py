"""What an operator does to one account (spec §6.3): refresh its tokens now, health-check
many, read its quota now, list its plan's models, test its connection (streamed as SSE), and
onboard one through OAuth."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import connection
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from proxy.admin_api import pool
from proxy.admin_api.display import china_iso
from proxy.admin_api.envelope import ApiError, BodyCode, bad_request, not_found, ok
from proxy.admin_api.fields import LONGEST_ID, IdListField, IdSerializer
from proxy.admin_api.schema import ANY_DATA, query
from proxy.admin_api.selectors import account_or_none
from proxy.admin_api.views.accounts import (
    account_from_query,
    account_item,
    onboarding_error,
    upstream_account,
)
from proxy.admin_api.views.base import AdminAPIView
from proxy.models import Account, AccountStatus
from proxy.models_catalog import DEFAULT_MODEL_ID
from proxy.services.account_tokens import AccountOnboardingError
from proxy.services.oauth_onboarding import oauth_session_exchange, oauth_session_start
from proxy.services.token_refresh import (
    REQUEST_PERMIT_WAIT_SECONDS,
    RefreshResult,
    token_refresh_account,
)
from proxy.services.upkeep_accounts import current_fingerprint

# One confirmation of a permanent refusal is not enough (token refresh's rule): two attempts.
REFRESH_ATTEMPTS = 2
STAGGER_JITTER = 0.30
LONGEST_MODEL_ID = 200

_OUTCOMES = {
    RefreshResult.REFRESHED: ("alive", None),
    RefreshResult.EXPIRED: ("dead", "the OAuth server refused the refresh token (expired)"),
    RefreshResult.BANNED: ("dead", "the OAuth server refused the account (banned)"),
    RefreshResult.RETRY_LATER: (
        "dead",
        "the token endpoint could not be reached; the worker tries again in about 10 minutes",
    ),
    RefreshResult.LEASE_BUSY: ("skipped", "a refresh of this account is already running"),
    RefreshResult.NOT_ELIGIBLE: (
        "skipped",
        "no refresh token, or disabled or banned (not refreshed)",
    ),
    RefreshResult.TOKEN_CHANGED: ("skipped", "its tokens changed meanwhile"),
    RefreshResult.NOT_DUE: ("skipped", "refreshed meanwhile"),
}


def refresh_one(account: Account) -> dict:
    """Refresh ``account`` now (its lease, the token endpoint, two attempts at most)."""
    started = time.monotonic()
    previous = account.status
    if account.status in (AccountStatus.DISABLED, AccountStatus.BANNED) or not (
        account.refresh_token
    ):
        result, error = _OUTCOMES[RefreshResult.NOT_ELIGIBLE]
    else:
        # A web worker waits: two attempts, each waiting at most as long for a permit as a
        # /v1 request does, each call bounded by the OAuth client's timeout.
        outcome = token_refresh_account(
            account_id=account.pk,
            force=True,
            max_attempts=REFRESH_ATTEMPTS,
            permit_wait_seconds=REQUEST_PERMIT_WAIT_SECONDS,
        )
        result, error = _OUTCOMES[outcome]
    return {
        "id": account.pk,
        "email": account.email or "",
        "previousStatus": previous,
        "result": result,
        "error": error,
        "durationMs": round((time.monotonic() - started) * 1000),
    }


class AccountRefreshView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Refresh an account's tokens now",
        request=IdSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        checked = IdSerializer(data=self.json_object(request))
        checked.is_valid(raise_exception=True)
        account = account_or_none(checked.validated_data["id"])
        if account is None:
            raise not_found("Account not found")
        return ok(refresh_one(account))


class HealthCheckSerializer(serializers.Serializer):
    ids = IdListField(required=False)
    stagger_ms = serializers.IntegerField(required=False, min_value=0, max_value=30_000)
    concurrency = serializers.IntegerField(required=False, min_value=1, max_value=10)

    def validate_stagger_ms(self, value: int) -> int:
        if value != 0 and value < 500:
            raise serializers.ValidationError("must be 0 or 500–30000")
        return value


class AccountHealthCheckView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Refresh many accounts, staggered (default: every account)",
        request=HealthCheckSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        if "staggerMs" in body and "stagger_ms" not in body:
            body = {**body, "stagger_ms": body.pop("staggerMs")}
        checked = HealthCheckSerializer(data=body)
        checked.is_valid(raise_exception=True)
        values = checked.validated_data
        stagger = values.get("stagger_ms", 3000) / 1000
        concurrency = values.get("concurrency", 2)
        accounts = Account.objects.order_by("added_at", "id")
        if "ids" in values:
            accounts = accounts.filter(pk__in=values["ids"])
        accounts = list(accounts)

        def check(index: int, account: Account) -> dict:
            try:
                delay = min(index, concurrency) * stagger
                if delay:
                    time.sleep(delay * (1 + STAGGER_JITTER * (2 * random.random() - 1)))  # noqa: S311
                return refresh_one(account)
            finally:
                # Each worker thread has its own database connection: give it back.
                connection.close()

        with ThreadPoolExecutor(max_workers=concurrency) as executor:
            results = list(executor.map(check, range(len(accounts)), accounts))
        summary = {"total": len(results), "alive": 0, "dead": 0, "skipped": 0}
        for result in results:
            summary[result["result"]] += 1
        return ok({"summary": summary, "results": results})


class AccountQuotaView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Read an account's usage (quota) from the upstream now and apply it",
        parameters=[query("id", "The account's id", required=True)],
        responses={200: ANY_DATA, 502: OpenApiResponse(description="50201 upstream failed")},
    )
    def get(self, request):
        account = account_from_query(request)
        try:
            reading = pool.usage_read_and_apply(upstream_account(account), now=timezone.now())
        except pool.UsageUnavailable as error:
            raise ApiError(BodyCode.BAD_GATEWAY, f"Quota query failed: {error}") from None
        account.refresh_from_db()
        return ok(
            {
                "quota": reading.snapshot.quota,
                "quotaData": account_item(account)["quota"],
                "raw": reading.raw,
                "planType": account.plan_type,
                "account": account_item(account),
            }
        )


class AccountModelsView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="The models the account's plan offers",
        parameters=[query("id", "The account's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        entries = pool.account_models(
            upstream_account(account_from_query(request)), now=timezone.now()
        )
        if not entries:
            raise bad_request("no available models returned")
        return ok(
            {
                "models": [
                    {"id": entry["id"], "label": entry.get("displayName") or entry["id"]}
                    for entry in entries
                ]
            }
        )


def _sse(events):
    async def frames():
        async for event in events:
            yield f"data: {json.dumps(event)}\n\n".encode()

    return frames()


class AccountTestView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Test an account's connection (server-sent events)",
        parameters=[
            query("id", "The account's id", required=True),
            query("modelId", f"The model to ask (default {DEFAULT_MODEL_ID})"),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                description="data: events test_start, request, content…, then test_complete "
                "or error"
            )
        },
    )
    def get(self, request):
        account = account_from_query(request)
        model = (request.query_params.get("modelId") or "").strip() or DEFAULT_MODEL_ID
        if len(model) > LONGEST_MODEL_ID:
            raise bad_request("modelId is too long")
        events = pool.connection_test_events(
            upstream_account(account),
            model=model,
            disabled=account.status == AccountStatus.DISABLED,
            fingerprint=current_fingerprint(),
            clock=timezone.now,
        )
        response = StreamingHttpResponse(_sse(events), content_type="text/event-stream")
        response["X-Accel-Buffering"] = "no"
        return response


class OAuthAuthorizeView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Start an OAuth onboarding (PKCE): the URL to open",
        request=None,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        session = oauth_session_start(now=timezone.now())
        return ok(
            {
                "sessionId": session.session_id,
                "authUrl": session.auth_url,
                "expiresAt": china_iso(session.expires_at),
                "expiresAtDisplay": china_iso(session.expires_at),
            }
        )


class OAuthExchangeSerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=LONGEST_ID)
    callbackUrl = serializers.CharField(required=False, allow_blank=True, max_length=8192)
    code = serializers.CharField(required=False, allow_blank=True, max_length=4096)
    state = serializers.CharField(required=False, allow_blank=True, max_length=512)
    # A field named like DRF's Field.label: the stubs take it for that attribute.
    label = serializers.CharField(  # type: ignore[assignment]
        required=False, allow_blank=True, max_length=64
    )


class OAuthExchangeView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Finish an OAuth onboarding with the callback URL (or code and state)",
        request=OAuthExchangeSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        checked = OAuthExchangeSerializer(data=self.json_object(request))
        checked.is_valid(raise_exception=True)
        values = checked.validated_data
        try:
            account, created = oauth_session_exchange(
                session_id=values["sessionId"],
                callback_url=values.get("callbackUrl") or None,
                code=values.get("code") or None,
                state=values.get("state") or None,
                label=values.get("label") or None,
                now=timezone.now(),
            )
        except AccountOnboardingError as error:
            raise onboarding_error(error) from None
        return ok(
            {
                "sourceFormat": "oauth",
                "imported": 1 if created else 0,
                "updated": 0 if created else 1,
                "skipped": 0,
                "invalid": 0,
                "account": account_item(account),
            }
        )
