"""Building blocks of the operators' console (telemetry's own, reused by the proxy's admin:
the dependency runs proxy → telemetry, never back)."""

from __future__ import annotations

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.utils.functional import cached_property


def masked(secret: str | None) -> str:
    """A secret as a list may show it: the first 6 characters and the length, never the rest."""
    if not secret:
        return "—"
    return f"{secret[:6]}… ({len(secret)} chars)"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Facts and derived rows: listed and inspected, never added, changed or deleted here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class EstimatedCountPaginator(Paginator):
    """For the fact tables: an unfiltered list uses PostgreSQL's row estimate instead of a
    full ``count(*)`` over millions of rows; filtered lists count exactly."""

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if query is not None and not query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "select reltuples::bigint from pg_class where oid = %s::regclass",
                    [query.model._meta.db_table],
                )
                estimate = cursor.fetchone()[0]
            if estimate and estimate > 10_000:
                return estimate
        return super().count
