"""``python manage.py account_add``: add an upstream account from its access and/or refresh
token (the JWT claims say who it is); the same ChatGPT identity again gets the new tokens.

Tokens are read from standard input (never from the command line, where they would land in the
shell history and the process list): prompted without echo, or with ``--stdin`` two lines, the
access token then the refresh token (either may be empty).
"""

from __future__ import annotations

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from proxy.services.account_tokens import (
    AccountOnboardingError,
    account_tokens_resolve,
    account_upsert_from_tokens,
)


def describe(account, created: bool) -> str:
    verb = "Added account" if created else "Gave new tokens to account"
    who = ", ".join(
        part for part in (account.email, account.plan_type, account.chatgpt_account_id) if part
    )
    return f"{verb} {account.pk} ({who}); status {account.status}."


class Command(BaseCommand):
    help = "Add an account from its access token and/or refresh token (read from stdin)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--label", help="A label shown in the admin (at most 64 characters).")
        parser.add_argument(
            "--stdin",
            action="store_true",
            help="Read two lines from standard input: the access token, then the refresh token "
            "(leave a line empty to give only the other one).",
        )

    def handle(self, *args, label: str | None = None, stdin: bool = False, **options) -> None:
        if stdin:
            access_token = sys.stdin.readline().strip() or None
            refresh_token = sys.stdin.readline().strip() or None
        else:
            access_token = getpass.getpass("Access token (Enter for none): ").strip() or None
            refresh_token = getpass.getpass("Refresh token (Enter for none): ").strip() or None
        now = timezone.now()
        try:
            resolved = account_tokens_resolve(
                access_token=access_token,
                refresh_token=refresh_token,
                now=now,
                label="an account added by manage.py account_add",
            )
            account, created = account_upsert_from_tokens(resolved=resolved, now=now, label=label)
        except AccountOnboardingError as error:
            raise CommandError(f"{error} Nothing was added.") from None
        self.stdout.write(self.style.SUCCESS(describe(account, created)))
