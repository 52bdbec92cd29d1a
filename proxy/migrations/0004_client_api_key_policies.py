# client_api_key_policies: seed 004 §8's extension path for per-key limits (issue 25). The seed's
# own tables are untouched. The foreign key is created as the seed writes its others
# (<table>_<column>_fkey ... ON DELETE CASCADE): deleting a key deletes its policy.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("proxy", "0003_admin_login_event_ids"),
    ]

    operations = [
        migrations.CreateModel(
            name="ClientApiKeyPolicy",
            fields=[
                (
                    "key",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="policy",
                        serialize=False,
                        to="proxy.clientapikey",
                    ),
                ),
                ("requests_per_minute", models.BigIntegerField(blank=True, null=True)),
                ("tokens_per_minute", models.BigIntegerField(blank=True, null=True)),
                ("max_concurrent_requests", models.BigIntegerField(blank=True, null=True)),
                (
                    "daily_budget_usd",
                    models.DecimalField(blank=True, decimal_places=4, max_digits=12, null=True),
                ),
                (
                    "monthly_budget_usd",
                    models.DecimalField(blank=True, decimal_places=4, max_digits=12, null=True),
                ),
                ("allowed_models", models.JSONField(blank=True, null=True)),
                ("account_group", models.TextField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "key policy",
                "verbose_name_plural": "key policy",
                "db_table": "client_api_key_policies",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("requests_per_minute__isnull", True),
                            ("requests_per_minute__gt", 0),
                            _connector="OR",
                        ),
                        name="client_api_key_policies_requests_per_minute_check",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("tokens_per_minute__isnull", True),
                            ("tokens_per_minute__gt", 0),
                            _connector="OR",
                        ),
                        name="client_api_key_policies_tokens_per_minute_check",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("max_concurrent_requests__isnull", True),
                            ("max_concurrent_requests__gt", 0),
                            _connector="OR",
                        ),
                        name="client_api_key_policies_max_concurrent_requests_check",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("daily_budget_usd__isnull", True),
                            ("daily_budget_usd__gt", 0),
                            _connector="OR",
                        ),
                        name="client_api_key_policies_daily_budget_usd_check",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("monthly_budget_usd__isnull", True),
                            ("monthly_budget_usd__gt", 0),
                            _connector="OR",
                        ),
                        name="client_api_key_policies_monthly_budget_usd_check",
                    ),
                ],
            },
        ),
        migrations.RunSQL(
            sql="alter table client_api_key_policies"
            " add constraint client_api_key_policies_key_id_fkey"
            " foreign key (key_id) references client_api_keys(id) on delete cascade",
            reverse_sql="alter table client_api_key_policies"
            " drop constraint client_api_key_policies_key_id_fkey",
        ),
    ]
