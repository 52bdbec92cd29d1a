"""Secret columns never take part in an admin list lookup.

Django's changelist turns any query parameter naming a local field into a filter
(``?access_token__startswith=ey``), and whether the list comes back empty tells one character of
the secret at a time. Every admin of the operators' site refuses a lookup whose path touches one
of these columns (directly or through a relation), with Django's 400 for a disallowed lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Model
from django.http import HttpRequest

# (app label, model name, field name) of every column that holds a credential (seed 004 §2.6).
SECRET_FIELDS = frozenset(
    {
        ("proxy", "account", "access_token"),
        ("proxy", "account", "refresh_token"),
        ("proxy", "accountcookie", "value"),
        ("proxy", "clientapikey", "key"),
        ("proxy", "runtimesettings", "admin_api_key_hash"),
        ("proxy", "adminuser", "password"),
    }
)


def lookup_touches_secret(model: type[Model], lookup: str) -> bool:
    """Whether the filter ``lookup`` on ``model`` reads a secret column on its way."""
    for part in lookup.split("__"):
        try:
            field = model._meta.get_field(part)
        except FieldDoesNotExist:
            return False  # a transform or lookup name (startswith, iexact, ...): the path ended
        if (model._meta.app_label, model._meta.model_name, field.name) in SECRET_FIELDS:
            return True
        if not field.is_relation or field.related_model is None:
            return False
        model = field.related_model
    return False


if TYPE_CHECKING:
    # A mixin of ModelAdmins: checked as one (at run time a plain class).
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class SecretLookupGuard(_ModelAdminMixin):
    """A ModelAdmin mixin: refuse list lookups through secret columns."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        if lookup_touches_secret(self.model, lookup):
            return False
        return super().lookup_allowed(lookup, value, request)
