"""Runtime settings (spec §6.5) and the admin API key.

A POST is a partial patch of the ``runtime_settings`` row; the next ``/v1`` request anywhere
sees it (each request reads the row in its one statement; caches follow the Redis version key
the service bumps). Retention days are not editable here.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from proxy.admin_api.envelope import ApiError, BodyCode, bad_request, ok
from proxy.admin_api.schema import ANY_DATA
from proxy.admin_api.views.base import AdminAPIView
from proxy.models import RotationStrategy, RuntimeSettings
from proxy.models_catalog import LONGEST_MODEL_NAME, InvalidAliases, checked_aliases
from proxy.services.admin_api_key import (
    admin_api_key_delete,
    admin_api_key_exists,
    admin_api_key_regenerate,
)
from proxy.services.runtime_settings import (
    SETTING_BOUNDS,
    runtime_settings_ensure,
    runtime_settings_update,
)

logger = logging.getLogger(__name__)


def _bounded(column: str) -> serializers.IntegerField:
    """An optional whole number within the column's bounds (the console's too)."""
    lowest, highest = SETTING_BOUNDS[column]
    return serializers.IntegerField(min_value=lowest, max_value=highest, required=False)


class SettingsSerializer(serializers.Serializer):
    modelAliases = serializers.DictField(
        child=serializers.CharField(max_length=LONGEST_MODEL_NAME, allow_blank=False),
        required=False,
    )
    refreshMarginSeconds = _bounded("refresh_margin_seconds")
    refreshConcurrency = _bounded("refresh_concurrency")
    maxConcurrentPerAccount = _bounded("max_concurrent_per_account")
    requestIntervalMs = _bounded("request_interval_ms")
    rotationStrategy = serializers.ChoiceField(choices=RotationStrategy.values, required=False)

    def validate_modelAliases(self, aliases: dict) -> dict:
        try:
            return checked_aliases(aliases)
        except InvalidAliases as error:
            raise serializers.ValidationError(str(error)) from None


# API field → runtime_settings column
_COLUMNS = {
    "modelAliases": "model_aliases_json",
    "refreshMarginSeconds": "refresh_margin_seconds",
    "refreshConcurrency": "refresh_concurrency",
    "maxConcurrentPerAccount": "max_concurrent_per_account",
    "requestIntervalMs": "request_interval_ms",
    "rotationStrategy": "rotation_strategy",
}


def settings_data(row: RuntimeSettings) -> dict:
    return {field: getattr(row, column) for field, column in _COLUMNS.items()}


class SettingsView(AdminAPIView):
    @extend_schema(tags=["settings"], summary="The runtime settings", responses={200: ANY_DATA})
    def get(self, request):
        return ok(settings_data(runtime_settings_ensure(now=timezone.now())))

    @extend_schema(
        tags=["settings"],
        summary="Change some runtime settings (the next /v1 request sees them)",
        request=SettingsSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        for field in body:
            if field not in _COLUMNS:
                raise bad_request(f"Unsupported settings field: {field}")
        checked = SettingsSerializer(data=body)
        checked.is_valid(raise_exception=True)
        changes = {_COLUMNS[field]: value for field, value in checked.validated_data.items()}
        try:
            row = runtime_settings_update(changes=changes, now=timezone.now())
        except DatabaseError:
            logger.exception("runtime settings could not be saved")
            raise ApiError(
                BodyCode.SETTINGS_PERSIST_FAILED, "The settings could not be saved"
            ) from None
        return ok(settings_data(row))


class AdminApiKeyView(AdminAPIView):
    @extend_schema(
        tags=["settings"], summary="Whether an admin API key is set", responses={200: ANY_DATA}
    )
    def get(self, request):
        return ok({"exists": admin_api_key_exists()})

    @extend_schema(tags=["settings"], summary="Remove the admin API key", responses={200: ANY_DATA})
    def delete(self, request):
        return ok({"deleted": admin_api_key_delete(now=timezone.now())})


class AdminApiKeyRegenerateView(AdminAPIView):
    @extend_schema(
        tags=["settings"],
        summary="Issue a new admin API key (shown once; only its SHA-256 is kept)",
        request=None,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        return ok({"key": admin_api_key_regenerate(now=timezone.now())})
