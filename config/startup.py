"""Checks every long-running process (web, worker, beat) passes before it serves.

A refusal stops the process with a message that says what to do. ``manage.py`` commands never
run these checks, so ``migrate`` and friends always work.
"""

from __future__ import annotations

import secrets
import sys
from typing import TextIO

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from config.secret_files import read_or_create_secret


class StartupRefused(Exception):
    """The process must not start; the message says why and what to do."""


def run_startup_checks(process: str, *, out: TextIO = sys.stdout) -> None:
    """Run every start-up check for ``process`` ("web", "worker" or "beat").

    Raises StartupRefused with an actionable message.
    """
    ensure_bot_secrets_are_long_enough()
    ensure_public_base_url_is_an_https_origin()
    ensure_schema_history_matches_code()
    ensure_default_admin(out=out)
    ensure_runtime_settings()
    ensure_fingerprint()


# The bot's two secrets that a caller presents (in a URL, in a header): guessable when short.
BOT_SECRETS = ("ADMIN_SECRET", "TELEGRAM_WEBHOOK_SECRET")
MINIMUM_BOT_SECRET_LENGTH = 16


def ensure_bot_secrets_are_long_enough() -> None:
    """Refuse an ADMIN_SECRET or TELEGRAM_WEBHOOK_SECRET shorter than 16 characters (unset is
    fine: the bot is then not configured, and its selfcheck says so)."""
    short = [
        name
        for name in BOT_SECRETS
        if getattr(settings, name) is not None
        and len(getattr(settings, name)) < MINIMUM_BOT_SECRET_LENGTH
    ]
    if short:
        raise StartupRefused(
            f"{' and '.join(short)} must have at least {MINIMUM_BOT_SECRET_LENGTH} characters "
            "(e.g. `openssl rand -hex 16`)"
        )


def ensure_public_base_url_is_an_https_origin() -> None:
    """Refuse a PUBLIC_BASE_URL that is set but not a bare https origin: Telegram opens Mini
    Apps and delivers webhooks over https only, and the original's "ignored when invalid"
    would send the verification button and the webhook to another origin without a word (a
    departure listed in docs/departures.md). The value is not echoed (it may hold credentials)."""
    from bots.conf import parse_public_base_url

    raw = settings.PUBLIC_BASE_URL
    if raw is not None and parse_public_base_url(raw) is None:
        raise StartupRefused(
            "PUBLIC_BASE_URL must be a bare https origin such as https://support.example.com "
            "(https only: Telegram opens Mini Apps and delivers webhooks over https; no path, "
            "query, fragment or credentials), or unset"
        )


def ensure_schema_history_matches_code() -> None:
    """Refuse when schema_migrations is not an ordered prefix of the code's migrations."""
    from config.schema_history import SchemaHistoryError, verify_schema_history

    try:
        verify_schema_history()
    except SchemaHistoryError as error:
        raise StartupRefused(f"schema history: {error}") from None
    except DatabaseError as error:
        raise StartupRefused(
            f"the database is unreachable ({type(error).__name__}); check DATABASE_URL"
        ) from None


def ensure_fingerprint() -> None:
    """Seed the upstream fingerprint row ``current`` on first start."""
    from proxy.services.fingerprints import fingerprint_ensure_current

    fingerprint_ensure_current(now=timezone.now())


def ensure_runtime_settings() -> None:
    """Create the runtime_settings singleton with the spec's defaults on first start."""
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())


def ensure_default_admin(*, out: TextIO = sys.stdout) -> None:
    """Create the admin from CPR_ADMIN_DEFAULT_PASSWORD when ``admin_users`` is empty.

    With the embedded stores and no password configured, a strong random password is
    generated, kept in var/admin-password.txt (0600) and printed once.
    Raises StartupRefused when the table is missing or the configured password is unusable.
    """
    from proxy.password_validation import admin_password_problem
    from proxy.services.admin_users import admin_user_create_default, admin_user_exists

    try:
        if admin_user_exists():
            return
    except DatabaseError as error:
        raise StartupRefused(
            "the database schema is missing or unreachable "
            f"({type(error).__name__}); run `python manage.py migrate` first"
        ) from None

    password = settings.CPR_ADMIN_DEFAULT_PASSWORD
    generated = False
    if password is None and settings.EMBEDDED_POSTGRES:
        password, generated = read_or_create_secret(
            settings.GENERATED_ADMIN_PASSWORD_FILE, lambda: secrets.token_urlsafe(18)
        )
    problem = admin_password_problem(password)
    if problem is not None:
        raise StartupRefused(
            f"admin_users is empty and CPR_ADMIN_DEFAULT_PASSWORD {problem}: set it to at least "
            "12 characters that are not a well-known weak value"
        )
    created = admin_user_create_default(password=password, now=timezone.now())
    if created is None:
        return
    username = settings.CPR_ADMIN_USERNAME
    if generated:
        out.write(
            f"Created the admin '{username}' with a generated password (shown once, also kept in "
            f"{settings.GENERATED_ADMIN_PASSWORD_FILE}):\n    {password}\n"
        )
    elif settings.CPR_ADMIN_DEFAULT_PASSWORD is None:
        out.write(
            f"Created the admin '{username}' with the password kept in "
            f"{settings.GENERATED_ADMIN_PASSWORD_FILE}\n"
        )
    else:
        out.write(f"Created the admin '{username}' from CPR_ADMIN_DEFAULT_PASSWORD\n")
