"""``python manage.py set_admin_password``: change the admin's password (Argon2-hashed)."""

from __future__ import annotations

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from proxy.services.admin_users import AdminPasswordRejected, admin_user_set_password


class Command(BaseCommand):
    help = "Set the admin password (prompted twice, or read from stdin with --password-stdin)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="Read the new password from the first line of standard input.",
        )

    def handle(self, *args, password_stdin: bool = False, **options) -> None:
        if password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        else:
            password = getpass.getpass("New admin password: ")
            if getpass.getpass("Repeat it: ") != password:
                raise CommandError("The two passwords differ; nothing changed.")
        try:
            admin_user_set_password(password=password, now=timezone.now())
        except AdminPasswordRejected as rejection:
            raise CommandError(f"{str(rejection).capitalize()}; nothing changed.") from None
        self.stdout.write(self.style.SUCCESS("Admin password changed."))
