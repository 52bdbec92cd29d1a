# pool_versions: the version of the pool snapshot the /v1 request path keeps in memory
# (proxy/pool_snapshot.py, issue 23). Not a seed table: an extension beside the seed's, as
# seed 004 §8 allows; the seed's tables are not changed, only watched by triggers.
#
# Each write to a table the snapshot is read from adds one to a row of pool_versions, in the
# writing transaction: row triggers for INSERT, DELETE and an UPDATE that changed the row (an
# update to the same values is not a change), a statement trigger for TRUNCATE. The version is
# the sum of the rows. Several rows (text ids, seed §1: no serial keys), each writer taking
# one that no other transaction holds (SKIP LOCKED; a new row when every one is held): writers
# never wait for each other here, so the bump cannot take part in a deadlock. One bump per
# transaction (a transaction-local setting remembers it; rolled back with a savepoint like the
# bump itself).

from django.db import migrations

SNAPSHOT_TABLES = (
    "accounts",
    "account_usage",
    "account_cookies",
    "runtime_settings",
    "fingerprints",
)
CREATE_TABLE = """
create table pool_versions (
  id text primary key,
  version bigint not null default 0 check (version >= 0)
);
insert into pool_versions (id) select 'shard-' || n from generate_series(1, 8) as n;
"""

CREATE_FUNCTION = """
create function pool_version_bump() returns trigger language plpgsql as $$
begin
  if current_setting('cpr.pool_version_bumped', true) = txid_current()::text then
    return null;
  end if;
  update pool_versions set version = version + 1
   where id = (select id from pool_versions order by random() limit 1 for update skip locked);
  if not found then
    insert into pool_versions (id, version) values ('shard-' || md5(random()::text), 1);
  end if;
  perform set_config('cpr.pool_version_bumped', txid_current()::text, true);
  return null;
end
$$;
"""

TRIGGERS = """
create trigger {table}_pool_version after insert or delete on {table}
  for each row execute function pool_version_bump();
create trigger {table}_pool_version_update after update on {table}
  for each row when (old.* is distinct from new.*) execute function pool_version_bump();
create trigger {table}_pool_version_truncate after truncate on {table}
  for each statement execute function pool_version_bump();
"""

DROP_TRIGGERS = """
drop trigger if exists {table}_pool_version on {table};
drop trigger if exists {table}_pool_version_update on {table};
drop trigger if exists {table}_pool_version_truncate on {table};
"""

DROP = """
drop function if exists pool_version_bump();
drop table if exists pool_versions;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("proxy", "0004_client_api_key_policies"),
    ]

    operations = [
        migrations.RunSQL(CREATE_TABLE + CREATE_FUNCTION, DROP),
        *(
            migrations.RunSQL(TRIGGERS.format(table=table), DROP_TRIGGERS.format(table=table))
            for table in SNAPSHOT_TABLES
        ),
    ]
