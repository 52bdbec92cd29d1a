"""The account forms of the proxy's Django admin: adding an account from its tokens, and
editing its label, status (among those an operator may set), tokens and daily burn cap."""

from __future__ import annotations

from typing import cast

from django import forms
from django.utils import timezone

from proxy.admin_account_policy import DailyBurnCapFormMixin
from proxy.models import Account, AccountStatus
from proxy.services.account_tokens import (
    AccountOnboardingError,
    account_tokens_check_owner,
    account_tokens_resolve,
)
from proxy.services.accounts import ADMIN_SETTABLE_STATUSES


def _secret_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text=help_text,
    )


class AccountAddForm(forms.ModelForm):
    """Adding an account as an operator does it: its tokens; the JWT claims say who it is."""

    access_token = _secret_field(
        "access token", "A ChatGPT access token (JWT). Optional when a refresh token is given."
    )
    refresh_token = _secret_field(
        "refresh token",
        "Optional with a valid access token. Alone, it is exchanged at once (and so spent: the "
        "rotated one is stored).",
    )

    class Meta:
        model = Account
        fields = ("label",)

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        try:
            self.resolved = account_tokens_resolve(
                access_token=cleaned.get("access_token") or None,
                refresh_token=cleaned.get("refresh_token") or None,
                now=timezone.now(),
                label="an account added in the console",
            )
        except AccountOnboardingError as error:
            raise forms.ValidationError(str(error)) from None
        return cleaned


SETTABLE_STATUS_CHOICES = [(status.value, status.label) for status in ADMIN_SETTABLE_STATUSES]


class AccountForm(DailyBurnCapFormMixin, forms.ModelForm):
    """Editing an account: its label, and its status among those an operator may set.

    A status only the proxy sets (banned, expired, quota_exhausted) is offered as the first,
    selected choice, so saving a label edit keeps it: a select without a selected option would
    make the browser submit "active" and put a banned account back into service.
    """

    # The hidden initial copy records what the page showed, so a status the proxy changed
    # after the page was rendered is not undone by an operator who only edited the label.
    status = forms.ChoiceField(choices=SETTABLE_STATUS_CHOICES, show_hidden_initial=True)
    new_access_token = _secret_field(
        "new access token", "Replace the tokens (same ChatGPT account). Leave empty to keep them."
    )
    new_refresh_token = _secret_field(
        "new refresh token", "Alone, it is exchanged at once for a new access token."
    )

    class Meta:
        model = Account
        fields = ("label", "status")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        current = self.instance.status
        if current and current not in ADMIN_SETTABLE_STATUSES:
            keep = (current, f"{AccountStatus(current).label} (kept; set by the proxy)")
            status = cast(forms.ChoiceField, self.fields["status"])  # the model's choices
            status.choices = [keep, *SETTABLE_STATUS_CHOICES]

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        self.resolved = None
        access, refresh = cleaned.get("new_access_token"), cleaned.get("new_refresh_token")
        if access or refresh:
            try:
                self.resolved = account_tokens_resolve(
                    access_token=access or None,
                    refresh_token=refresh or None,
                    now=timezone.now(),
                    label=f"account {self.instance.pk} (new tokens in the console)",
                )
                account_tokens_check_owner(account=self.instance, resolved=self.resolved)
            except AccountOnboardingError as error:
                raise forms.ValidationError(str(error)) from None
        return cleaned

    def chosen_status(self) -> str | None:
        """The status the operator chose, or None when the status is to stay as it is."""
        status = self.cleaned_data["status"]
        if "status" not in self.changed_data or status not in ADMIN_SETTABLE_STATUSES:
            return None
        return status
