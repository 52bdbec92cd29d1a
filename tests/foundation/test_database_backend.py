"""The project's database backend (config.postgres): Django's PostgreSQL backend without the
implicit ``*_like`` pattern indexes, which no seed lists."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection


def test_the_project_runs_on_its_own_postgresql_backend():
    assert settings.DATABASES["default"]["ENGINE"] == "config.postgres"


@pytest.mark.django_db
def test_the_migrated_schema_has_no_like_pattern_indexes():
    with connection.cursor() as cursor:
        cursor.execute(
            "select indexname from pg_indexes where schemaname = 'public' and indexname like %s",
            ["%\\_like"],
        )
        like_indexes = [name for (name,) in cursor.fetchall()]

    assert like_indexes == []
