"""The settings screen: the raw rows, and the verification switches changed as the commands do."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from bots.admin.common import ReadOnlyAdmin, audit_from_console
from bots.conf import load_config
from bots.models import AuditAction, AuditOutcome, Setting
from bots.selectors import (
    DISABLED,
    ENABLED,
    MODE_BUTTON,
    MODE_MATH,
    MODE_TURNSTILE,
    VERIFY_ENABLED,
    VERIFY_MODE,
    bot_current_id,
    bot_id_of_token,
    verification_settings_get,
)
from bots.services.settings import verification_setting_change
from bots.verification.turnstile import missing_keys


class VerificationSwitchesForm(forms.Form):
    verify_enabled = forms.ChoiceField(
        label="Verification", choices=[(ENABLED, "on"), (DISABLED, "off")]
    )
    verify_mode = forms.ChoiceField(
        label="Mode",
        choices=[
            (MODE_MATH, "math question"),
            (MODE_BUTTON, "button only (weak)"),
            (MODE_TURNSTILE, "Turnstile web page"),
        ],
        help_text="Turnstile needs TURNSTILE_SITE_KEY and TURNSTILE_SECRET_KEY.",
    )

    def clean_verify_mode(self) -> str:
        mode = self.cleaned_data["verify_mode"]
        switching = mode != verification_settings_get().mode
        missing = missing_keys(load_config()) if mode == MODE_TURNSTILE and switching else []
        if missing:
            # As /verifymode_turnstile (spec §4.6): never a switch to a mode that cannot verify
            # anybody. Keeping Turnstile (the form always sends the mode) is no switch: the
            # other switch — verification off, say — still goes through.
            raise forms.ValidationError(f"Turnstile needs {', '.join(missing)}.")
        return mode


@admin.register(Setting)
class SettingAdmin(ReadOnlyAdmin):
    """The raw rows, and the verification switches changed as the commands change them."""

    list_display = ("key", "value")
    change_list_template = "bots/admin/setting_change_list.html"

    def get_urls(self) -> list[URLPattern]:
        switches = path(
            "verification/",
            self.admin_site.admin_view(self.verification_view),
            name="bots_setting_verification",
        )
        return [switches, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict | None = None
    ) -> HttpResponse:
        switches = verification_settings_get()
        form = VerificationSwitchesForm(
            initial={
                "verify_enabled": ENABLED if switches.enabled else DISABLED,
                "verify_mode": switches.mode,
            }
        )
        context = {
            **(extra_context or {}),
            "switches": switches,
            "verification_form": form,
            "bot_recorded": bot_current_id() is not None,
        }
        return super().changelist_view(request, context)

    def verification_view(self, request: HttpRequest) -> HttpResponse:
        """POST: set both switches through the commands' service (same values bump nothing)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        changelist = HttpResponseRedirect(reverse("admin:bots_setting_changelist"))
        if not request.user.has_perm("bots.change_setting"):
            self.message_user(request, "Not allowed.", messages.ERROR)
            return changelist
        form = VerificationSwitchesForm(request.POST)
        if not form.is_valid():
            self.message_user(request, f"Nothing changed: {form.errors.as_text()}", messages.ERROR)
            return changelist
        # The switches are global: they can be set before setwebhook has recorded the bot (a
        # fresh install), the audit row then names the bot of the configured token.
        bot_id = bot_current_id() or bot_id_of_token()
        enabled_changed = verification_setting_change(
            bot_id=bot_id, key=VERIFY_ENABLED, value=form.cleaned_data["verify_enabled"]
        )
        mode_changed = verification_setting_change(
            bot_id=bot_id, key=VERIFY_MODE, value=form.cleaned_data["verify_mode"]
        )
        switched_on = form.cleaned_data["verify_enabled"] == ENABLED
        if bot_id is not None:
            audit_from_console(
                request,
                bot_id=bot_id,
                action=AuditAction.VERIFICATION,
                outcome=AuditOutcome.DONE,
                detail=(
                    f"verification {'on' if switched_on else 'off'},"
                    f" mode {form.cleaned_data['verify_mode']}"
                ),
            )
        if enabled_changed or mode_changed:
            text = "Switches saved; outstanding challenges were voided."
        else:
            text = "Switches unchanged (same values): nothing voided."
        if bot_id is None:
            # admin_audit_log rows belong to a bot; with no token there is none to name.
            text += " No bot is configured yet (TELEGRAM_BOT_TOKEN), so the audit trail has no row."
        self.message_user(request, text, messages.SUCCESS)
        return changelist
