from django.contrib.admin.forms import AdminAuthenticationForm


class AdminLoginForm(AdminAuthenticationForm):
    """The Django admin log-in form, labelled for the single admin's login name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The login name is a setting, not a column: without this the field is labelled "Id".
        self.fields["username"].label = "Username"
