"""Django's PostgreSQL backend, minus the implicit ``*_like`` pattern indexes, with a pool that
never hands out a connection the server has closed.

Django adds a ``text_pattern_ops`` index next to every indexed or unique text column so that
``LIKE 'x%'`` can use an index. The storage documents list every index the schema may have
(seed 004 §2.8: each index serves a real query); these extra indexes serve none and would make
the schema drift from the seeds, so they are never created.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base, schema

from config.postgres.pool import LiveConnectionPool


class DatabaseSchemaEditor(schema.DatabaseSchemaEditor):
    def _create_like_index_sql(self, model, field):
        return None


class DatabaseWrapper(base.DatabaseWrapper):
    SchemaEditorClass = DatabaseSchemaEditor

    @property
    def pool(self):
        """Django 5.2's ``pool`` property with ``LiveConnectionPool`` in place of
        ``ConnectionPool`` and no ``check`` callback (config/postgres/pool.py says why)."""
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options:
            return None
        # _connection_pools and _configure_connection: Django 5.2's own (its pool property's),
        # left out of django-stubs as private.
        if self.alias not in self._connection_pools:  # type: ignore[attr-defined]
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            connect_kwargs = self.get_connection_params()
            # Ensure we run in autocommit, Django properly sets it later on.
            connect_kwargs["autocommit"] = True
            pool = LiveConnectionPool(
                kwargs=connect_kwargs,
                open=False,  # Do not open the pool during startup.
                configure=self._configure_connection,  # type: ignore[attr-defined]
                **({} if pool_options is True else pool_options),
            )
            # setdefault(): threads racing at start-up agree on the first pool made.
            self._connection_pools.setdefault(self.alias, pool)  # type: ignore[attr-defined]
        return self._connection_pools[self.alias]  # type: ignore[attr-defined]
