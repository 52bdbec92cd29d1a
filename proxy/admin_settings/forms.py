"""The runtime settings page's form: the strategy as choices that say what each does, every
number with its bounds and meaning, and the model aliases as rows (``aliases``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.widgets import AdminRadioSelect

from proxy.admin_settings.aliases import alias_rows
from proxy.models import RotationStrategy, RuntimeSettings
from proxy.services.runtime_settings import RUNTIME_SETTINGS_DEFAULTS, SETTING_BOUNDS

# What each strategy does (spec §3.4, proxy/scheduling/ranking.py), in the operator's words.
STRATEGY_CHOICES = [
    (
        RotationStrategy.SMART,
        "Smart (recommended): the account with the most room — free slots first, then the "
        "fewest tokens and requests in its current window; an account at its quota limit only "
        "when no other is left. Equal accounts take turns.",
    ),
    (
        RotationStrategy.QUOTA_RESET_PRIORITY,
        "Quota reset first: the account whose window resets soonest (what it has left would "
        "be lost at the reset), then the one with the fewest requests, then the longest unused; "
        "accounts at their quota limit last. Equal accounts take turns.",
    ),
    (
        RotationStrategy.ROUND_ROBIN,
        "Round robin: every account in turn, in the order they were added.",
    ),
    (
        RotationStrategy.STICKY,
        "Sticky: the account used last, while it has a free slot; another only when it is "
        "busy or failing. One account's quota is spent first.",
    ),
]

# (label, help text) of each number; the bounds and the default are added to the help text.
NUMBERS: dict[str, tuple[str, str]] = {
    "max_concurrent_per_account": (
        "Requests at once per account",
        "How many requests one account serves at the same time. A request that finds every "
        "account full waits for a free slot.",
    ),
    "request_interval_ms": (
        "Pause between starts on one account (ms)",
        "When an account is already serving a request, the next one sent to it waits until "
        "this long after the previous start. An idle account starts at once; 0 never waits.",
    ),
    "refresh_margin_seconds": (
        "Refresh tokens this early (seconds)",
        "An account's access token is refreshed this long before it expires (each account "
        "between 85 % and 115 % of it, so refreshes do not bunch up).",
    ),
    "refresh_concurrency": (
        "Token refreshes at once",
        "How many accounts' tokens are refreshed at the same time, across every process.",
    ),
    "usage_retention_days": (
        "Keep usage records (days)",
        "The hourly trim deletes usage records older than this.",
    ),
    "ops_error_retention_days": (
        "Keep error records (days)",
        "The hourly trim deletes ops error records older than this.",
    ),
    "bucket_retention_days": (
        "Keep 15-minute buckets (days)",
        "The hourly trim deletes request-time buckets (the dashboard's and usage page's "
        "figures) older than this.",
    ),
}


def _number_field(column: str) -> forms.IntegerField:
    label, meaning = NUMBERS[column]
    lowest, highest = SETTING_BOUNDS[column]
    default = RUNTIME_SETTINGS_DEFAULTS[column]
    return forms.IntegerField(
        label=label,
        min_value=lowest,
        max_value=highest,
        help_text=f"{meaning} {lowest}–{highest:,}; default {default:,}.",
    )


class RuntimeSettingsForm(forms.ModelForm):
    """The columns of the singleton an operator edits, and ``aliases``: the alias rows,
    checked as the admin API checks ``modelAliases``. ``cleaned_data["model_aliases_json"]``
    holds the map to store once the form is valid."""

    rotation_strategy = forms.ChoiceField(
        label="Rotation strategy",
        choices=STRATEGY_CHOICES,
        # Django admin's radio list (class "radiolist"): one choice a line, at full width.
        widget=AdminRadioSelect(attrs={"class": "radiolist"}),
        help_text="Which account serves the next request. A change applies to the next request.",
    )
    max_concurrent_per_account = _number_field("max_concurrent_per_account")
    request_interval_ms = _number_field("request_interval_ms")
    refresh_margin_seconds = _number_field("refresh_margin_seconds")
    refresh_concurrency = _number_field("refresh_concurrency")
    usage_retention_days = _number_field("usage_retention_days")
    ops_error_retention_days = _number_field("ops_error_retention_days")
    bucket_retention_days = _number_field("bucket_retention_days")

    class Meta:
        model = RuntimeSettings
        fields = ("rotation_strategy", *NUMBERS)

    @property
    def media(self) -> forms.Media:
        """Django's own "Add another" for the alias rows (the template marks them up as a
        tabular inline), after the jQuery it needs, in the order Django's inlines list them."""
        extra = "" if settings.DEBUG else ".min"
        inlines = forms.Media(
            js=[
                f"admin/js/vendor/jquery/jquery{extra}.js",
                "admin/js/jquery.init.js",
                "admin/js/inlines.js",
            ]
        )
        return super().media + inlines

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored_aliases = dict(self.instance.model_aliases_json or {})
        self.aliases = alias_rows(
            stored=self.stored_aliases, data=self.data if self.is_bound else None
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.aliases.is_valid():
            raise forms.ValidationError(
                "Nothing was saved: correct the marked model alias rows.", code="aliases"
            )
        cleaned["model_aliases_json"] = self.aliases.aliases
        return cleaned

    @property
    def aliases_changed(self) -> bool:
        return self.cleaned_data.get("model_aliases_json") != self.stored_aliases
