"""Django's PostgreSQL backend, minus the implicit ``*_like`` pattern indexes.

Django adds a ``text_pattern_ops`` index next to every indexed or unique text column so that
``LIKE 'x%'`` can use an index. The storage documents list every index the schema may have
(seed 004 §2.8: each index serves a real query); these extra indexes serve none and would make
the schema drift from the seeds, so they are never created.
"""

from django.db.backends.postgresql import base, schema


class DatabaseSchemaEditor(schema.DatabaseSchemaEditor):
    def _create_like_index_sql(self, model, field):
        return None


class DatabaseWrapper(base.DatabaseWrapper):
    SchemaEditorClass = DatabaseSchemaEditor
