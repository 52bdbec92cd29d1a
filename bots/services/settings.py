"""Writes to ``settings``: the verification switches (spec §5.2, seed "settings").

A change of ``verify_enabled`` or ``verify_mode`` is one transaction, in this order:

1. if the value really changes, clear the pending challenge of every user of the bot who has one;
2. under the same condition, advance ``verify_generation`` (insert ``'1'`` when it is missing);
3. upsert the new value.

"Really changes" is decided inside each statement, against what the table holds: the value in
effect — a missing or malformed row counts as its default, exactly as
``bots.selectors.verification_settings_get`` reads it — differs from the new one. So a switch to
the mode already in effect (``/verifymode_math`` on a fresh install included) bumps nothing and
keeps pending challenges, while every real change voids all outstanding challenges; switching
back never revives them (their columns are gone, and their generation is behind). Verification
results (``is_verified``, ``verified_at``) are never touched.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import Exists, Q

from bots.models import BotUser, Setting
from bots.selectors import (
    MODE_MATH,
    VERIFICATION_MODES,
    VERIFY_ENABLED,
    VERIFY_GENERATION,
    VERIFY_MODE,
)
from bots.services.users import PENDING_CHALLENGE_CLEARED

ENABLED = "1"
DISABLED = "0"

# For each switch: the values it may hold, and the one a missing or malformed row means.
SWITCHES: dict[str, tuple[tuple[str, ...], str]] = {
    VERIFY_ENABLED: ((ENABLED, DISABLED), ENABLED),
    VERIFY_MODE: (VERIFICATION_MODES, MODE_MATH),
}

# A user with any pending-challenge column set has an outstanding challenge.
_HAS_PENDING_CHALLENGE = Q(
    *[Q(**{f"{column}__isnull": False}) for column in PENDING_CHALLENGE_CLEARED], _connector=Q.OR
)

# Serialises switch changes, so that "does the value really change" and the generation bump
# are decided against the latest committed switches (two admins switching at the same moment).
_LOCK_KEY = "bots.settings.verification"

_BUMP_GENERATION_SQL = """
insert into settings as stored (key, value)
select %(key)s, '1' where {changes}
on conflict (key) do update
    set value = case
        when stored.value ~ '^[0-9]{{1,18}}$' then (stored.value::bigint + 1)::text
        else '1'
    end
"""


class InvalidSwitchValue(ValueError):
    """The key is not a verification switch, or the value is not one it may hold."""


def _value_changes(key: str, value: str) -> tuple[Exists, str, dict[str, object]]:
    """The condition "the value in effect for ``key`` differs from ``value``", as an ORM
    expression and as SQL with its parameters (both evaluated by PostgreSQL)."""
    allowed, default = SWITCHES[key]
    if value == default:
        # In effect is the default unless the row holds another allowed value.
        others = [other for other in allowed if other != value]
        rows = Setting.objects.filter(key=key, value__in=others)
        sql = (
            "exists (select 1 from settings where key = %(key_switch)s and value = any(%(others)s))"
        )
        return Exists(rows), sql, {"key_switch": key, "others": others}
    rows = Setting.objects.filter(key=key, value=value)
    sql = "not exists (select 1 from settings where key = %(key_switch)s and value = %(value)s)"
    return ~Exists(rows), sql, {"key_switch": key, "value": value}


@transaction.atomic
def verification_setting_change(*, bot_id: int, key: str, value: str) -> bool:
    """Set the switch ``key`` (``verify_enabled`` ``'1'``/``'0'``, or ``verify_mode``) to
    ``value``; True when the value really changed (challenges voided, generation advanced).

    Raises InvalidSwitchValue for an unknown key or value (nothing written).
    """
    if key not in SWITCHES or value not in SWITCHES[key][0]:
        raise InvalidSwitchValue(f"{key}={value!r}")
    changes, changes_sql, changes_parameters = _value_changes(key, value)
    with connection.cursor() as cursor:
        cursor.execute("select pg_advisory_xact_lock(hashtext(%s))", [_LOCK_KEY])
    BotUser.objects.filter(_HAS_PENDING_CHALLENGE, changes, bot_id=bot_id).update(
        **PENDING_CHALLENGE_CLEARED
    )
    with connection.cursor() as cursor:
        cursor.execute(
            _BUMP_GENERATION_SQL.format(changes=changes_sql),
            {"key": VERIFY_GENERATION, **changes_parameters},
        )
        changed = cursor.rowcount == 1
    Setting.objects.bulk_create(
        [Setting(key=key, value=value)],
        update_conflicts=True,
        unique_fields=["key"],
        update_fields=["value"],
    )
    return changed
