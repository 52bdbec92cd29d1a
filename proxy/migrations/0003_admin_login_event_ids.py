# admin_login_events.id as seed 004 §2.4 wants every id: text generated in code
# (``login_<uuid hex>``), not a bigint identity column. 0002 created it as Django's BigAutoField,
# the one database-generated id of the project. Rows already written get an id of the same
# form (their order in the console is ``created_at desc, id desc`` and does not change), and
# ``locked_out`` gets its default in the database like the seed's other boolean columns.
#
# Not reversible: text ids cannot go back into a bigint column.

from django.db import migrations, models

import proxy.identifiers


class Migration(migrations.Migration):
    dependencies = [
        ("proxy", "0002_admin_login_events"),
    ]

    operations = [
        migrations.AlterField(
            model_name="adminloginevent",
            name="id",
            field=models.TextField(
                default=proxy.identifiers.new_login_event_id,
                primary_key=True,
                serialize=False,
            ),
        ),
        migrations.RunSQL(
            "update admin_login_events"
            " set id = 'login_' || replace(gen_random_uuid()::text, '-', '')",
            reverse_sql=None,
        ),
        migrations.AlterField(
            model_name="adminloginevent",
            name="locked_out",
            field=models.BooleanField(db_default=False),
        ),
    ]
