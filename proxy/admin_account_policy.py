"""An account's policy in the console (issue 25 item 5): its daily burn cap as a field of the
account's page, checked by the same rules as the admin API (``proxy.services.account_policies``)
and written through its services, and today's burn as the page and the list show it."""

from __future__ import annotations

from django import forms
from django.utils import timezone

from proxy.daily_burn import DailyBurn
from proxy.models import Account, AccountPolicy
from proxy.services.account_policies import (
    AccountPolicyInvalid,
    account_policy_set,
    daily_burn_cap_value,
)


def burn_text(burn: DailyBurn | None) -> str:
    """``1200 / 5000 tokens``, with ``· capped until 00:00 UTC`` over the cap; the burn alone
    for an uncapped account."""
    if burn is None:
        return "—"
    if burn.cap_tokens is None:
        return f"{burn.burned_tokens} tokens"
    text = f"{burn.burned_tokens} / {burn.cap_tokens} tokens"
    return text + (" · capped until 00:00 UTC" if burn.over_cap else "")


class DailyBurnCapFormMixin(forms.Form):
    """The cap field of the account's form: its policy's value, empty = no cap."""

    daily_burn_cap_tokens = forms.IntegerField(
        label="daily burn cap (tokens)",
        required=False,
        help_text="Input + output tokens per UTC day (the runway's measure); over it the account "
        "is not scheduled until 00:00 UTC. Empty: no cap.",
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        instance = getattr(self, "instance", None)
        if instance is not None and instance.pk:
            policy = AccountPolicy.objects.filter(account_id=instance.pk).first()
            self.initial["daily_burn_cap_tokens"] = policy.daily_burn_cap_tokens if policy else None

    def clean_daily_burn_cap_tokens(self) -> int | None:
        try:
            return daily_burn_cap_value(self.cleaned_data.get("daily_burn_cap_tokens"))
        except AccountPolicyInvalid as invalid:
            raise forms.ValidationError(invalid.reason) from None

    def save_daily_burn_cap(self, account: Account) -> None:
        """Set or remove the cap when the operator changed it (a post without the field, or
        with the value shown, changes nothing)."""
        if "daily_burn_cap_tokens" in self.changed_data:
            account_policy_set(
                account=account,
                daily_burn_cap_tokens=self.cleaned_data["daily_burn_cap_tokens"],
                now=timezone.now(),
            )
