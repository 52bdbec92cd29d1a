"""Django admin over the proxy's tables."""

from django.contrib import admin

from proxy.forms import AdminLoginForm
from proxy.models import AdminUser

admin.site.login_form = AdminLoginForm
admin.site.site_header = "Operators' console"
admin.site.site_title = "Operators' console"


@admin.register(AdminUser)
class AdminUserAdmin(admin.ModelAdmin):
    """Read-only: the password is changed with `manage.py set_admin_password`."""

    list_display = ("id", "created_at", "updated_at", "last_login")
    fields = ("id", "created_at", "updated_at", "last_login")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
