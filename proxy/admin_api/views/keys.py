"""Client keys (spec §6.4): list (the full key, for the authenticated admin only), create,
update, delete, and the ready-to-paste Codex CLI configuration and CC Switch link."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from proxy.admin_api.display import china_iso, relative
from proxy.admin_api.envelope import bad_request, not_found, ok
from proxy.admin_api.fields import (
    IdsSerializer,
    optional_text,
    refuse_unknown_keys,
    required_query,
)
from proxy.admin_api.key_config import client_config
from proxy.admin_api.pagination import page_request, paginate
from proxy.admin_api.schema import ANY_DATA, PAGING_PARAMETERS, query
from proxy.admin_api.views.base import AdminAPIView
from proxy.models import ClientApiKey
from proxy.services.client_api_keys import (
    client_api_key_create,
    client_api_key_delete,
    client_api_key_update,
)

LONGEST_NAME = 128
LONGEST_LABEL = 128
LONGEST_SEARCH = 200
KEY_STATUSES = ("active", "disabled")


def key_item(key: ClientApiKey, *, now) -> dict:
    return {
        "id": key.id,
        "name": key.name,
        "label": key.label,
        "prefix": key.prefix,
        "key": key.key,
        "enabled": key.enabled,
        "status": "active" if key.enabled else "disabled",
        "createdAt": china_iso(key.created_at),
        "createdAtDisplay": relative(key.created_at, now=now),
        "lastUsedAt": china_iso(key.last_used_at),
        "lastUsedAtDisplay": relative(key.last_used_at, now=now),
    }


class KeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=LONGEST_NAME)


class KeyUpdateSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=128)
    # A field named like DRF's Field.label: the stubs take it for that attribute.
    label = serializers.CharField(  # type: ignore[assignment]
        max_length=LONGEST_LABEL, required=False, allow_blank=True, allow_null=True
    )
    status = serializers.ChoiceField(choices=KEY_STATUSES, required=False)


class KeysView(AdminAPIView):
    @extend_schema(
        tags=["keys"],
        summary="Client keys, newest first (search: name, label or id)",
        parameters=[*PAGING_PARAMETERS, query("search", "Words of the name/label, or the id")],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        search = (request.query_params.get("search") or "").strip()[:LONGEST_SEARCH]
        keys = ClientApiKey.objects.all()
        if search:
            keys = keys.filter(
                Q(name__icontains=search) | Q(label__icontains=search) | Q(id__icontains=search)
            )
        now = timezone.now()
        return ok(
            paginate(
                keys,
                time_column="created_at",
                request=page_request(request.query_params),
                present=lambda rows: [key_item(key, now=now) for key in rows],
            )
        )

    @extend_schema(
        tags=["keys"],
        summary="Issue a new key (sk_…)",
        request=KeyCreateSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        refuse_unknown_keys(body, {"name"}, how="is not a field of this request")
        checked = KeyCreateSerializer(data=body)
        checked.is_valid(raise_exception=True)
        name = checked.validated_data["name"].strip()
        if not name:
            raise bad_request("name is required")
        now = timezone.now()
        return ok(key_item(client_api_key_create(name=name, now=now), now=now))


class KeyUpdateView(AdminAPIView):
    @extend_schema(
        tags=["keys"],
        summary="Change a key's label or status (active|disabled; effective at once)",
        request=KeyUpdateSerializer,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        body = self.json_object(request)
        refuse_unknown_keys(body, {"id", "label", "status"}, how="is not editable")
        checked = KeyUpdateSerializer(data=body)
        checked.is_valid(raise_exception=True)
        values = checked.validated_data
        key = ClientApiKey.objects.filter(pk=values["id"]).first()
        if key is None:
            raise not_found("Client key not found")
        changes: dict = {}
        if "label" in values:
            changes["label"] = optional_text(values["label"], "label", longest=LONGEST_LABEL)
        if "status" in values:
            changes["enabled"] = values["status"] == "active"
        key = client_api_key_update(key=key, changes=changes)
        return ok(key_item(key, now=timezone.now()))


class KeyDeleteView(AdminAPIView):
    @extend_schema(
        tags=["keys"], summary="Delete keys", request=IdsSerializer, responses={200: ANY_DATA}
    )
    def post(self, request):
        checked = IdsSerializer(data=self.json_object(request))
        checked.is_valid(raise_exception=True)
        deleted, missing = client_api_key_delete(ids=checked.validated_data["ids"])
        return ok({"deleted": deleted, "notFound": missing})


class KeyConfigView(AdminAPIView):
    @extend_schema(
        tags=["keys"],
        summary="Codex CLI config.toml / auth.json and the CC Switch import link of a key",
        parameters=[query("id", "The key's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        key = ClientApiKey.objects.filter(pk=required_query(request, "id")).first()
        if key is None:
            raise not_found("Client key not found")
        return ok(client_config(key=key, origin=request.build_absolute_uri("/").rstrip("/")))
