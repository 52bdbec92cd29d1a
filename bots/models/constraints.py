"""The naming rule of the bot's CHECK constraints (see the package docstring)."""

from django.db import models
from django.db.models import Q


def column_check(table: str, column: str, condition: Q) -> models.CheckConstraint:
    """A CHECK constraint named like PostgreSQL's own: ``<table>_<column>_check``."""
    return models.CheckConstraint(condition=condition, name=f"{table}_{column}_check")
