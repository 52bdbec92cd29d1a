"""How the proxy's models name their constraints: as PostgreSQL names inline column checks,
``<table>_<column>_check`` (the seed's DDL diffs clean against the migrated catalog)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def check(table: str, column: str, condition: Q) -> models.CheckConstraint:
    return models.CheckConstraint(condition=condition, name=f"{table}_{column}_check")


def non_negative(table: str, *columns: str) -> list[models.CheckConstraint]:
    return [check(table, column, Q(**{f"{column}__gte": 0})) for column in columns]
