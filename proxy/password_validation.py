"""The admin password rule as a Django password validator (``AUTH_PASSWORD_VALIDATORS``).

Django runs it wherever a password is set through its forms and commands (the admin's
password-change page, ``manage.py changepassword``); our services run it too
(``proxy.services.admin_users``: first start, ``set_admin_password``), so there is one rule.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

MINIMUM_PASSWORD_LENGTH = 12
# codex-proxy spec §6.2: values that must never become the admin password.
WEAK_PASSWORDS = frozenset(
    {"", "admin", "123456", "password", "changeme", "change-me", "replace-me", "codex-proxy-rs"}
)


def admin_password_problem(password: str | None) -> str | None:
    """Return why ``password`` may not be the admin password, or None when it is acceptable."""
    if password is None or password == "":
        return "is missing"
    if password.strip().lower() in WEAK_PASSWORDS:
        return "is a well-known weak value"
    if len(password) < MINIMUM_PASSWORD_LENGTH:
        return f"is shorter than {MINIMUM_PASSWORD_LENGTH} characters"
    return None


class AdminPasswordValidator:
    """At least 12 characters, and none of the well-known weak values."""

    def validate(self, password: str, user: object = None) -> None:
        problem = admin_password_problem(password)
        if problem is not None:
            raise ValidationError(f"This password {problem}.", code="admin_password_rule")

    def get_help_text(self) -> str:
        return (
            f"At least {MINIMUM_PASSWORD_LENGTH} characters, and not a well-known weak value "
            "(admin, password, changeme, …)."
        )
