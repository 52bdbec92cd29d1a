"""Log-in for the single admin: username = CPR_ADMIN_USERNAME, password = admin_users row.

Every ``django.contrib.auth.authenticate()`` call goes through the log-in throttle
(``proxy.services.admin_login``), so no path checks a password without it.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from proxy.models import AdminUser
from proxy.services.admin_login import LoginOutcome, admin_login_attempt


class AdminCredentialsBackend:
    """Authenticates the configured username against the first ``admin_users`` row (Argon2)."""

    def authenticate(self, request, username: str | None = None, password: str | None = None, **_):
        if username is None or password is None:
            return None
        meta = getattr(request, "META", {})
        result = admin_login_attempt(
            username=username,
            password=password,
            client_ip=meta.get("REMOTE_ADDR"),
            user_agent=meta.get("HTTP_USER_AGENT"),
            surface="auth",
            now=timezone.now(),
        )
        if result.outcome is LoginOutcome.LOCKED:
            raise PermissionDenied("too many failed log-in attempts")
        return result.user

    def get_user(self, user_id: str) -> AdminUser | None:
        return AdminUser.objects.filter(pk=user_id).first()
