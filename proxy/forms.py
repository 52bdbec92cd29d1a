"""The operators' console's own forms: log-in and password change (the runtime settings' form
is ``proxy.admin_settings.forms``)."""

from __future__ import annotations

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.admin.forms import AdminPasswordChangeForm as DjangoPasswordChangeForm
from django.utils import timezone

from proxy.services.admin_login import LoginOutcome, admin_login_attempt
from proxy.services.admin_users import admin_user_set_password

TOO_MANY_ATTEMPTS = "too_many_attempts"


class AdminLoginForm(AdminAuthenticationForm):
    """The Django admin log-in form, labelled for the single admin's login name, checked under
    the log-in throttle (``proxy.services.admin_login``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The login name is a setting, not a column: without this the field is labelled "Id".
        self.fields["username"].label = "Username"
        self.retry_after_seconds = 0

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        result = admin_login_attempt(
            username=username,
            password=password,
            client_ip=self.request.META.get("REMOTE_ADDR") if self.request else None,
            user_agent=self.request.headers.get("user-agent") if self.request else None,
            surface="admin",
            now=timezone.now(),
        )
        if result.outcome is LoginOutcome.LOCKED:
            self.retry_after_seconds = result.retry_after_seconds
            minutes = max(1, round(result.retry_after_seconds / 60))
            raise forms.ValidationError(
                f"Too many failed log-in attempts. Try again in {minutes} minute(s).",
                code=TOO_MANY_ATTEMPTS,
            )
        if result.user is None:
            raise self.get_invalid_login_error()
        self.user_cache = result.user
        self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class AdminPasswordChangeForm(DjangoPasswordChangeForm):
    """Django's password-change form (old password, new one twice, AUTH_PASSWORD_VALIDATORS),
    saved through the service: every admin session ends and the generated password file goes."""

    def save(self, commit: bool = True):
        admin_user_set_password(password=self.cleaned_data["new_password1"], now=timezone.now())
        # The view re-hashes the session with this instance: give it the new password hash.
        self.user.refresh_from_db()
        return self.user
