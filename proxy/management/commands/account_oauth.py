"""``python manage.py account_oauth``: add an account by logging in to ChatGPT (spec §6.3
OAuth with PKCE), for operators without an admin session in a browser.

Prints the authorize URL; open it anywhere, log in, and paste the URL the browser was sent to
(``http://localhost:1455/auth/callback?code=…&state=…``; the page itself may fail to load, the
address bar is what counts). The session lasts 30 minutes.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from proxy.management.commands.account_add import describe
from proxy.services.account_tokens import AccountOnboardingError
from proxy.services.oauth_onboarding import oauth_session_exchange, oauth_session_start


class Command(BaseCommand):
    help = "Add an account through the ChatGPT login (prints a URL, reads the callback URL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--label", help="A label shown in the admin (at most 64 characters).")

    def handle(self, *args, label: str | None = None, **options) -> None:
        session = oauth_session_start(now=timezone.now())
        self.stdout.write(
            "Open this URL in a browser and log in to the ChatGPT account to add:\n\n"
            f"{session.auth_url}\n\n"
            "Then paste the address the browser was sent to "
            "(http://localhost:1455/auth/callback?code=...), within 30 minutes:"
        )
        self.stdout.flush()
        callback_url = sys.stdin.readline().strip()
        if not callback_url:
            raise CommandError("No callback URL given; nothing was added.")
        try:
            account, created = oauth_session_exchange(
                session_id=session.session_id,
                callback_url=callback_url,
                label=label,
                now=timezone.now(),
            )
        except AccountOnboardingError as error:
            raise CommandError(f"{error} Nothing was added.") from None
        self.stdout.write(self.style.SUCCESS(describe(account, created)))
