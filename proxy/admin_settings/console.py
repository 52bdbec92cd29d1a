"""The runtime settings page of the console (seed 004 §4.4's one row): strategy, limits and
retention with what each means, the model aliases as rows, and the admin API key. Saved
through ``proxy.services.runtime_settings`` (the next ``/v1`` request sees the change)."""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from proxy.admin_settings.aliases import ALIAS_PREFIX, TARGETS_LIST_ID, alias_target_suggestions
from proxy.admin_settings.api_key import AdminApiKeyPagesMixin, api_key_state
from proxy.admin_settings.forms import RuntimeSettingsForm
from proxy.models import RuntimeSettings
from proxy.runtime_state.model_snapshots import model_snapshots_get_all
from proxy.services.runtime_settings import EDITABLE_FIELDS, runtime_settings_update

logger = logging.getLogger(__name__)


def _known_models() -> list[str]:
    try:
        snapshots = model_snapshots_get_all()
    except (redis.RedisError, ValueError):
        # Only suggestions: without Redis (or with an unreadable snapshot) the built-in list.
        logger.warning("model snapshots unreadable; suggesting the built-in models")
        snapshots = {}
    return alias_target_suggestions(snapshots)


@admin.register(RuntimeSettings)
class RuntimeSettingsAdmin(AdminApiKeyPagesMixin, admin.ModelAdmin):
    form = RuntimeSettingsForm
    change_form_template = "admin/proxy/runtimesettings/change_form.html"
    list_display = (
        "rotation_strategy",
        "max_concurrent_per_account",
        "request_interval_ms",
        "usage_retention_days",
        "ops_error_retention_days",
        "bucket_retention_days",
        "updated_at",
    )
    fieldsets = (
        ("Which account serves a request", {"fields": ("rotation_strategy",)}),
        ("Limits", {"fields": ("max_concurrent_per_account", "request_interval_ms")}),
        ("Token refresh", {"fields": ("refresh_margin_seconds", "refresh_concurrency")}),
        (
            "Retention",
            {
                "fields": (
                    "usage_retention_days",
                    "ops_error_retention_days",
                    "bucket_retention_days",
                )
            },
        ),
        (None, {"fields": ("updated_at",)}),
    )
    readonly_fields = ("updated_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ):
        context.update(
            {
                "alias_targets": _known_models(),
                "alias_targets_id": TARGETS_LIST_ID,
                # Read by Django's inlines.js, as a tabular inline's data-inline-formset.
                "alias_formset_options": json.dumps(
                    {
                        "name": f"#{ALIAS_PREFIX}",
                        "options": {
                            "prefix": ALIAS_PREFIX,
                            "addText": "Add another alias",
                            "deleteText": "Remove",
                        },
                    }
                ),
                **api_key_state(),
            }
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        changes = {
            name: form.cleaned_data[name] for name in form.changed_data if name in EDITABLE_FIELDS
        }
        if form.aliases_changed:
            changes["model_aliases_json"] = form.cleaned_data["model_aliases_json"]
        if changes:
            runtime_settings_update(changes=changes, now=timezone.now())

    def construct_change_message(self, request, form, formsets, add=False):
        """Django's message names the changed fields; the aliases are not a form field."""
        message = super().construct_change_message(request, form, formsets, add)
        if form.aliases_changed:
            message.append({"changed": {"fields": ["Model aliases"]}})
        return message
