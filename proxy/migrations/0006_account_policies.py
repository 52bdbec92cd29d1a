# account_policies: an upstream account's daily burn cap (issue 25 item 5), on seed 004 §8's
# extension path beside client_api_key_policies. The seed's own tables are untouched. The
# foreign key is created as the seed writes its others (<table>_<column>_fkey ... ON DELETE
# CASCADE): deleting an account deletes its policy. The pool snapshot reads the table (whether
# a candidate is over its cap), so it gets 0005's pool_versions triggers: a cap set, removed or
# rolled into a new day reaches the next request.

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

pool_versions = import_module("proxy.migrations.0005_pool_versions")


class Migration(migrations.Migration):
    dependencies = [
        ("proxy", "0005_pool_versions"),
    ]

    operations = [
        migrations.CreateModel(
            name="AccountPolicy",
            fields=[
                (
                    "account",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="policy",
                        serialize=False,
                        to="proxy.account",
                    ),
                ),
                ("daily_burn_cap_tokens", models.BigIntegerField()),
                ("burn_day", models.DateField(blank=True, null=True)),
                ("burn_baseline_tokens", models.BigIntegerField(db_default=0)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "account policy",
                "verbose_name_plural": "account policy",
                "db_table": "account_policies",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("daily_burn_cap_tokens__gt", 0)),
                        name="account_policies_daily_burn_cap_tokens_check",
                    )
                ],
            },
        ),
        migrations.RunSQL(
            sql="alter table account_policies"
            " add constraint account_policies_account_id_fkey"
            " foreign key (account_id) references accounts(id) on delete cascade",
            reverse_sql="alter table account_policies"
            " drop constraint account_policies_account_id_fkey",
        ),
        migrations.RunSQL(
            pool_versions.TRIGGERS.format(table="account_policies"),
            pool_versions.DROP_TRIGGERS.format(table="account_policies"),
        ),
    ]
