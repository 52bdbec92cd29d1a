"""Log-in for the single admin: username = CPR_ADMIN_USERNAME, password = admin_users row."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.utils.crypto import constant_time_compare

from proxy.models import AdminUser


class AdminCredentialsBackend:
    """Authenticates the configured username against the first ``admin_users`` row (Argon2)."""

    def authenticate(self, request, username: str | None = None, password: str | None = None, **_):
        if username is None or password is None:
            return None
        admin = AdminUser.objects.order_by("created_at", "id").first()
        if not constant_time_compare(username, settings.CPR_ADMIN_USERNAME) or admin is None:
            # Hash anyway so that a wrong username costs as long as a wrong password.
            make_password(password)
            return None
        return admin if admin.check_password(password) else None

    def get_user(self, user_id: str) -> AdminUser | None:
        return AdminUser.objects.filter(pk=user_id).first()
