"""Accounts (spec §6.3): list with search and summary cards, detail, add by tokens, import,
export (behind the explicit sensitive confirmation), update, delete."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from proxy.admin_api import pool
from proxy.admin_api.account_items import account_items
from proxy.admin_api.display import china_iso
from proxy.admin_api.envelope import ApiError, BodyCode, bad_request, not_found, ok
from proxy.admin_api.fields import (
    LONGEST_ID,
    IdsSerializer,
    optional_text,
    refuse_unknown_keys,
    required_query,
)
from proxy.admin_api.pagination import page_request, paginate
from proxy.admin_api.schema import ANY_DATA, PAGING_PARAMETERS, query
from proxy.admin_api.selectors import account_or_none, accounts_matching, accounts_summary
from proxy.admin_api.views.base import AdminAPIView
from proxy.models import Account
from proxy.services.account_import import (
    ImportOutcome,
    ImportUnreadable,
    UsageProbe,
    accounts_import,
)
from proxy.services.account_tokens import (
    MAX_LABEL_LENGTH,
    MAX_TOKEN_LENGTH,
    AccountOnboardingError,
    account_tokens_resolve,
    account_upsert_from_tokens,
)
from proxy.services.accounts import (
    ADMIN_SETTABLE_STATUSES,
    account_delete,
    account_update_by_admin,
)

logger = logging.getLogger(__name__)

EXPORT_CONFIRMATION = "export_sensitive_accounts"


def onboarding_error(error: AccountOnboardingError) -> ApiError:
    code = {502: BodyCode.BAD_GATEWAY, 409: BodyCode.CONFLICT}.get(
        error.http_status, BodyCode.BAD_REQUEST
    )
    return ApiError(code, str(error))


def account_item(account: Account) -> dict:
    return account_items([account], now=timezone.now())[0]


def account_from_query(request) -> Account:
    """The account named by the ``id`` query parameter; 40001 without one, 40401 unknown."""
    account = account_or_none(required_query(request, "id"))
    if account is None:
        raise not_found("Account not found")
    return account


def upstream_account(account: Account) -> pool.UpstreamAccount:
    return pool.UpstreamAccount(
        id=account.pk,
        access_token=account.access_token,
        chatgpt_account_id=account.chatgpt_account_id,
        email=account.email,
        plan_type=account.plan_type,
    )


class AccountAddSerializer(serializers.Serializer):
    token = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=MAX_TOKEN_LENGTH
    )
    refreshToken = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=MAX_TOKEN_LENGTH
    )
    # A field named like DRF's Field.label: the stubs take it for that attribute.
    label = serializers.CharField(  # type: ignore[assignment]
        required=False, allow_blank=True, allow_null=True, max_length=MAX_LABEL_LENGTH
    )


class AccountUpdateSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=LONGEST_ID)
    # A field named like DRF's Field.label: the stubs take it for that attribute.
    label = serializers.CharField(  # type: ignore[assignment]
        required=False, allow_blank=True, allow_null=True, max_length=MAX_LABEL_LENGTH
    )
    status = serializers.ChoiceField(
        choices=[status.value for status in ADMIN_SETTABLE_STATUSES], required=False
    )


class AccountsView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Accounts, newest first, with quota windows, usage and eligibility",
        parameters=[
            *PAGING_PARAMETERS,
            query("search", "Part of the id, e-mail, label or ChatGPT ids"),
        ],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        listing = paginate(
            accounts_matching(request.query_params.get("search")),
            time_column="added_at",
            request=page_request(request.query_params),
            present=lambda rows: account_items(rows, now=timezone.now()),
        )
        listing["summary"] = accounts_summary()
        return ok(listing)

    @extend_schema(
        tags=["accounts"],
        summary="Add an account from its access token and/or refresh token",
        request=AccountAddSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        refuse_unknown_keys(
            body, {"token", "refreshToken", "label"}, how="is not a field of this request"
        )
        checked = AccountAddSerializer(data=body)
        checked.is_valid(raise_exception=True)
        values = checked.validated_data
        now = timezone.now()
        try:
            resolved = account_tokens_resolve(
                access_token=values.get("token") or None,
                refresh_token=values.get("refreshToken") or None,
                now=now,
                label="an account added through the admin API",
            )
            account, _ = account_upsert_from_tokens(
                resolved=resolved, now=now, label=values.get("label") or None
            )
        except AccountOnboardingError as error:
            raise onboarding_error(error) from None
        return ok(account_item(account))


class AccountDetailView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="One account (as in the list)",
        parameters=[query("id", "The account's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        return ok(account_item(account_from_query(request)))


class AccountUpdateView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Change an account's label or status (active|disabled)",
        request=AccountUpdateSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        refuse_unknown_keys(body, {"id", "label", "status"}, how="is not editable")
        checked = AccountUpdateSerializer(data=body)
        checked.is_valid(raise_exception=True)
        values = checked.validated_data
        account = account_or_none(values["id"])
        if account is None:
            raise not_found("Account not found")
        label = account.label
        if "label" in values:
            label = optional_text(values["label"], "label", longest=MAX_LABEL_LENGTH)
        account = account_update_by_admin(
            account=account, label=label, status=values.get("status"), now=timezone.now()
        )
        return ok(account_item(account))


class AccountDeleteView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Delete accounts (their counters and cookies too; affinity purged)",
        request=IdsSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        checked = IdsSerializer(data=self.json_object(request))
        checked.is_valid(raise_exception=True)
        deleted, missing = 0, []
        for account_id in dict.fromkeys(checked.validated_data["ids"]):
            account = account_or_none(account_id)
            if account is None:
                missing.append(account_id)
                continue
            account_delete(account=account)
            deleted += 1
        return ok({"deleted": deleted, "notFound": missing})


def export_entry(account: Account) -> dict:
    return {
        "id": account.pk,
        "email": account.email,
        "accountId": account.chatgpt_account_id,
        "userId": account.chatgpt_user_id,
        "label": account.label,
        "planType": account.plan_type,
        "token": account.access_token,
        "refreshToken": account.refresh_token,
        "accessTokenExpiresAt": china_iso(account.access_token_expires_at),
        "status": account.status,
        "addedAt": china_iso(account.added_at),
        "updatedAt": china_iso(account.updated_at),
    }


class AccountExportView(AdminAPIView):
    @extend_schema(
        tags=["accounts"],
        summary="Export accounts with their tokens (CPR format; needs the confirmation)",
        parameters=[
            query("ids", "Comma-separated account ids", required=True),
            query("confirm", f"Must be {EXPORT_CONFIRMATION}", required=True),
        ],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        if request.query_params.get("confirm") != EXPORT_CONFIRMATION:
            raise bad_request(f"Exporting tokens needs confirm={EXPORT_CONFIRMATION}")
        raw_ids = required_query(request, "ids", longest=200_000)
        ids = list(dict.fromkeys(part.strip() for part in raw_ids.split(",") if part.strip()))
        if not ids or len(ids) > 5000:
            raise bad_request("ids must name 1–5000 accounts")
        accounts = {account.pk: account for account in Account.objects.filter(pk__in=ids)}
        missing = [account_id for account_id in ids if account_id not in accounts]
        if missing:
            raise not_found(f"Account not found: {missing[0]}")
        # Who exported what, never the tokens themselves.
        logger.warning("admin API: %s account(s) exported with their tokens", len(ids))
        return ok(
            {
                "sourceFormat": "cpr",
                "accounts": [export_entry(accounts[account_id]) for account_id in ids],
            }
        )


def _usage_probe(account_id: str, chatgpt_account_id: str | None, token: str) -> UsageProbe:
    """The import's usage call for a token whose plan is unknown (its quota comes along)."""
    try:
        reading = pool.usage_read_and_apply(
            pool.UpstreamAccount(
                id=account_id, access_token=token, chatgpt_account_id=chatgpt_account_id
            ),
            now=timezone.now(),
            apply=False,
        )
    except pool.UsageUnavailable as error:
        return UsageProbe(refused_status=error.status)
    return UsageProbe(plan_type=reading.snapshot.plan_type, quota=reading.snapshot.quota)


class AccountImportView(AdminAPIView):
    @staticmethod
    def large_json_body(request):
        """The JSON body, up to ADMIN_IMPORT_MAX_BODY_BYTES (DRF's parser would stop at the 1 MiB
        every other route has): read from the request's stream, not ``request.body``."""
        limit = settings.ADMIN_IMPORT_MAX_BODY_BYTES
        raw = request._request.read(limit + 1)
        if len(raw) > limit:
            raise ApiError(BodyCode.BODY_TOO_LARGE, "The import is larger than 16 MiB")
        try:
            return json.loads(raw) if raw.strip() else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ApiError(BodyCode.MALFORMED_JSON, "Malformed JSON body") from None

    @extend_schema(
        tags=["accounts"],
        summary="Import accounts (CPR, Sub2API or CLIProxyAPI export; auto-detected)",
        parameters=[query("sourceFormat", "cpr | sub2api | cliproxyapi (default: detected)")],
        request={"application/json": {"type": "object", "additionalProperties": True}},
        responses={200: ANY_DATA},
    )
    def post(self, request):
        payload = self.large_json_body(request)
        try:
            report = accounts_import(
                payload=payload,
                source_format=request.query_params.get("sourceFormat"),
                now=timezone.now(),
                usage_probe=_usage_probe,
            )
        except ImportUnreadable as error:
            raise bad_request(str(error)) from None
        return ok(
            {
                "sourceFormat": report.source_format,
                "imported": report.count(ImportOutcome.IMPORTED),
                "updated": report.count(ImportOutcome.UPDATED),
                "skipped": report.count(ImportOutcome.SKIPPED),
                "invalid": report.count(ImportOutcome.INVALID),
                "results": [
                    {
                        "index": result.index,
                        "outcome": result.outcome.value,
                        "accountId": result.account_id,
                        "reason": result.reason,
                    }
                    for result in report.results
                ],
            }
        )
