"""The operator's tables of the proxy's storage (``proxy.models`` imports them, so they are
the app's models like the others): ``admin_users`` (seed 004 §4.2) and the log-in audit
``admin_login_events``."""

from typing import ClassVar

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.db.models import F, Q

from proxy.identifiers import new_admin_user_id, new_login_event_id
from proxy.model_constraints import check as _check


class AdminUser(AbstractBaseUser):
    """``admin_users`` (seed 004 §4.2): the one operator of both systems.

    The seed keeps no username column (single-admin model); the login name is the setting
    CPR_ADMIN_USERNAME, checked by ``proxy.auth_backend.AdminCredentialsBackend``. Django's
    ``last_login`` is the only column added to the seed's four.
    """

    id = models.TextField(primary_key=True, default=new_admin_user_id)
    password = models.TextField(db_column="password_hash")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    USERNAME_FIELD = "id"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    class Meta:
        db_table = "admin_users"
        verbose_name = "admin user"

    def __str__(self) -> str:
        return settings.CPR_ADMIN_USERNAME

    # The single admin may do everything; Django admin asks through these.
    is_active = True
    is_staff = True
    is_superuser = True

    def has_perm(self, perm: str, obj=None) -> bool:
        return True

    def has_perms(self, perm_list, obj=None) -> bool:
        return True

    def has_module_perms(self, app_label: str) -> bool:
        return True

    def get_short_name(self) -> str:
        return settings.CPR_ADMIN_USERNAME

    def get_full_name(self) -> str:
        return settings.CPR_ADMIN_USERNAME


class AdminLoginEvent(models.Model):
    """``admin_login_events`` (seed 004 §8's extension path for log-in audit): one row per
    log-in that reached the password check, and per attempt a lock-out refused.

    Not a seed §4 table; the attempted username is never stored (a password typed into the
    username field must not land in a table), only whether it was the admin's. The id follows
    seed §2.4 like every other table's: text generated in code (``login_<uuid hex>``), never a
    database sequence; the console lists rows by ``(created_at desc, id desc)``, a total order
    however many workers write at once.
    """

    id = models.TextField(primary_key=True, default=new_login_event_id)
    created_at = models.DateTimeField()
    # "admin" (the Django admin's form), "api" (the admin API), "auth" (any other
    # django.contrib.auth.authenticate() call).
    surface = models.TextField()
    outcome = models.TextField()  # success | failure
    # wrong_password | unknown_username | busy (no hash slot) | locked (refused by a lock-out,
    # not checked) | null on success
    reason = models.TextField(null=True, blank=True)
    # Whether this failure locked the client IP and/or the username out, or was refused by a
    # lock-out (reason "locked").
    locked_out = models.BooleanField(db_default=False)
    client_ip = models.TextField(null=True, blank=True)
    user_agent = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "admin_login_events"
        verbose_name = "admin log-in event"
        constraints = [
            _check("admin_login_events", "outcome", Q(outcome__in=["success", "failure"])),
        ]
        indexes = [
            models.Index(
                F("created_at").desc(), F("id").desc(), name="idx_admin_login_events_created_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} from {self.client_ip or 'unknown'} at {self.created_at}"
