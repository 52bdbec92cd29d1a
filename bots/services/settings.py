"""Writes to ``settings``: the verification switches (spec §5.2, seed "settings").

A change of ``verify_enabled`` or ``verify_mode`` is one transaction, in this order:

1. if the value really changes, clear the pending challenge of every user of the bot who has one;
2. under the same condition, advance ``verify_generation`` (``'1'`` when it is missing);
3. upsert the new value.

"Really changes" means the value in effect — read by ``bots.selectors.verification_settings_get``,
the one reader of the switches, so a missing or malformed row counts as its default — differs
from the new one. So a switch to the mode already in effect (``/verifymode_math`` on a fresh
install included) bumps nothing and keeps pending challenges, while every real change voids all
outstanding challenges; switching back never revives them (their columns are gone, and their
generation is behind). Verification results (``is_verified``, ``verified_at``) are never touched.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import Q

from bots.models import BotUser, Setting
from bots.selectors import (
    DISABLED,
    ENABLED,
    VERIFICATION_MODES,
    VERIFY_ENABLED,
    VERIFY_GENERATION,
    VERIFY_MODE,
    VerificationSettings,
    verification_settings_get,
)
from bots.services.users import PENDING_CHALLENGE_CLEARED

# The values each switch may be set to.
SWITCH_VALUES: dict[str, tuple[str, ...]] = {
    VERIFY_ENABLED: (ENABLED, DISABLED),
    VERIFY_MODE: VERIFICATION_MODES,
}

# A user with any pending-challenge column set has an outstanding challenge.
_HAS_PENDING_CHALLENGE = Q(
    *[Q(**{f"{column}__isnull": False}) for column in PENDING_CHALLENGE_CLEARED], _connector=Q.OR
)

# Serialises switch changes: every change reads the switches after taking it, so "does the value
# really change" and the generation bump are decided against the latest committed switches (two
# admins switching at the same moment), and nobody else writes them before this one commits.
_LOCK_KEY = "bots.settings.verification"


class InvalidSwitchValue(ValueError):
    """The key is not a verification switch, or the value is not one it may hold."""


def _value_in_effect(switches: VerificationSettings, key: str) -> str:
    if key == VERIFY_ENABLED:
        return ENABLED if switches.enabled else DISABLED
    return switches.mode


@transaction.atomic
def verification_setting_change(*, bot_id: int | None, key: str, value: str) -> bool:
    """Set the switch ``key`` (``verify_enabled`` ``'1'``/``'0'``, or ``verify_mode``) to
    ``value``; True when the value really changed (challenges voided, generation advanced).

    The switches are global (``settings`` has no bot_id); the challenges voided are those of
    ``bot_id``'s users, or every user's with None (the console before setwebhook recorded a
    bot: there is no bot to scope to).

    Takes the switches' transaction-level advisory lock. Raises InvalidSwitchValue for an
    unknown key or value (nothing written).
    """
    if value not in SWITCH_VALUES.get(key, ()):
        raise InvalidSwitchValue(f"{key}={value!r}")
    with connection.cursor() as cursor:
        cursor.execute("select pg_advisory_xact_lock(hashtext(%s))", [_LOCK_KEY])
    switches = verification_settings_get()
    changed = _value_in_effect(switches, key) != value
    rows = [Setting(key=key, value=value)]
    if changed:
        pending = BotUser.objects.filter(_HAS_PENDING_CHALLENGE)
        if bot_id is not None:
            pending = pending.filter(bot_id=bot_id)
        pending.update(**PENDING_CHALLENGE_CLEARED)
        rows.insert(0, Setting(key=VERIFY_GENERATION, value=str(switches.generation + 1)))
    Setting.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["key"], update_fields=["value"]
    )
    return changed
