"""What an operator does to one account (spec §6.3): refresh its tokens now, health-check
many, read its quota now, list its plan's models, test its connection (streamed as SSE), and
onboard one through OAuth."""

from __future__ import annotations

import json

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
from proxy.models import AccountStatus
from proxy.models_catalog import DEFAULT_MODEL_ID
from proxy.services.account_health import (
    RefreshReport,
    account_refresh_now,
    accounts_health_check,
)
from proxy.services.account_tokens import AccountOnboardingError
from proxy.services.oauth_onboarding import oauth_session_exchange, oauth_session_start
from proxy.services.upkeep_accounts import current_fingerprint

LONGEST_MODEL_ID = 200


def _refresh_item(report: RefreshReport) -> dict:
    return {
        "id": report.account_id,
        "email": report.email,
        "previousStatus": report.previous_status,
        "result": report.result,
        "error": report.error,
        "durationMs": report.duration_ms,
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
        return ok(_refresh_item(account_refresh_now(account=account)))


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
        report = accounts_health_check(
            account_ids=values.get("ids"),
            stagger_seconds=values.get("stagger_ms", 3000) / 1000,
            concurrency=values.get("concurrency", 2),
        )
        summary = {"total": len(report.results)}
        summary |= {result: report.count(result) for result in ("alive", "dead", "skipped")}
        results = [_refresh_item(result) for result in report.results]
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
            now=timezone.now,
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
