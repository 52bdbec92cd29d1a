"""The console's editor of a key's policy (issue 25): an inline on the key's page, checked by
the same rules as the admin API (``proxy.services.key_policies``) and written through its
services, with the key's use against the limits shown next to them."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html_join

from proxy.models import ClientApiKeyPolicy
from proxy.policies.usage import key_policy_usage
from proxy.services.key_policies import (
    BUDGET_FIELDS,
    COUNT_FIELDS,
    PolicyInvalid,
    key_policy_delete,
    key_policy_set,
    policy_values,
)


class KeyPolicyForm(forms.ModelForm):
    """``allowed_models`` is typed one name per line (or comma-separated); empty = all."""

    allowed_models = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One model name (or alias) per line; empty: every model.",
    )

    class Meta:
        model = ClientApiKeyPolicy
        fields = (*COUNT_FIELDS, *BUDGET_FIELDS, "allowed_models", "account_group")
        help_texts = {
            "account_group": "Only accounts whose label has the word group:<name>; empty: all.",
            "daily_budget_usd": "USD per UTC day, priced like the usage pages; empty: none.",
            "monthly_budget_usd": "USD per UTC month; empty: none.",
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        models = self.instance.allowed_models if self.instance.pk else None
        self.initial["allowed_models"] = "\n".join(models or [])

    def clean_allowed_models(self) -> list[str] | None:
        text = self.cleaned_data.get("allowed_models") or ""
        names = [name.strip() for name in text.replace(",", "\n").splitlines() if name.strip()]
        return names or None

    def clean(self) -> dict:
        cleaned = super().clean()
        assert cleaned is not None  # ModelForm.clean returns cleaned_data
        raw = {name: cleaned.get(name) for name in (*COUNT_FIELDS, *BUDGET_FIELDS)}
        raw["allowed_models"] = cleaned.get("allowed_models")
        raw["account_group"] = cleaned.get("account_group") or None
        try:
            self.policy_values = policy_values(raw)
        except PolicyInvalid as invalid:
            self.add_error(invalid.field, invalid.reason)
        return cleaned


class KeyPolicyInline(admin.StackedInline):
    model = ClientApiKeyPolicy
    form = KeyPolicyForm
    max_num = 1
    extra = 0
    can_delete = True
    verbose_name = "policy (limits; empty = unlimited)"
    readonly_fields = ("current_use",)

    def get_extra(self, request, obj=None, **kwargs) -> int:
        return 0 if obj is not None and hasattr(obj, "policy") else 1

    @admin.display(description="current use")
    def current_use(self, obj: ClientApiKeyPolicy) -> str:
        if obj is None or not obj.pk:
            return "—"
        usage = key_policy_usage(obj, now=timezone.now())
        rows = [
            ("requests in the last minute", usage["requestsLastMinute"], obj.requests_per_minute),
            ("tokens this minute", usage["tokensThisMinute"], obj.tokens_per_minute),
            ("in flight", usage["inFlight"], obj.max_concurrent_requests),
            ("spent today (USD)", usage["spentTodayUsd"], obj.daily_budget_usd),
            ("spent this month (USD)", usage["spentThisMonthUsd"], obj.monthly_budget_usd),
        ]
        return format_html_join(
            "",
            "<div>{}: <b>{}</b> of {}</div>",
            ((label, used, "unlimited" if limit is None else limit) for label, used, limit in rows),
        )


def save_policy_formset(formset, key) -> None:
    """Write the inline's policy through the services (create/replace, or delete). The
    formset's own save is not used, so the lists the admin's change message reads are set."""
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.forms:
        if not hasattr(form, "cleaned_data") or not form.cleaned_data:
            continue
        if form.cleaned_data.get("DELETE"):
            key_policy_delete(key=key)
        elif form.has_changed():
            key_policy_set(key=key, values=form.policy_values, now=timezone.now())
