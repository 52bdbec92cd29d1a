"""Tables of the proxy's storage document (seed 004_..., §4)."""

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models

from proxy.identifiers import new_admin_user_id


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
    REQUIRED_FIELDS: list[str] = []

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
