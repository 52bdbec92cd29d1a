"""Reads of the bot's tables. Every query of a business table filters by ``bot_id``."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Case, Exists, Max, OuterRef, Value, When

from bots.conf import raw_setting
from bots.models import (
    Bot,
    BotUser,
    Broadcast,
    DeleteConfirmation,
    Direction,
    RelayedMessage,
    Setting,
    Topic,
)

VERIFY_ENABLED = "verify_enabled"
VERIFY_MODE = "verify_mode"
VERIFY_GENERATION = "verify_generation"
VERIFICATION_KEYS = (VERIFY_ENABLED, VERIFY_MODE, VERIFY_GENERATION)

ENABLED = "1"
DISABLED = "0"
# A stored generation longer than this is dirty data (read as 0): 18 digits and the next
# generation still fit the bigint column a challenge copies it into.
GENERATION_MAX_DIGITS = 18

MODE_MATH = "math"
MODE_BUTTON = "button"
MODE_TURNSTILE = "turnstile"
VERIFICATION_MODES = (MODE_MATH, MODE_BUTTON, MODE_TURNSTILE)

BOT_TABLES = (
    "users",
    "topics",
    "messages",
    "settings",
    "processed_updates",
    "bots",
    "delete_confirmations",
    "broadcasts",
)


@dataclass(frozen=True)
class VerificationSettings:
    """One snapshot of the verification switches (spec §5.2), with the stored raw values.

    ``stored`` keeps what the table held (None = no row), so a later conditional UPDATE can
    require "the switches are still exactly what this snapshot saw".
    """

    enabled: bool
    mode: str
    generation: int
    stored: dict[str, str | None]


def bot_current_id() -> int | None:
    """The bot id of this deployment (``bots`` row written by setwebhook), or None.

    One deployment serves one bot (spec §1.6). Should the table hold several rows (the token
    was switched to another bot and back), the bot of the configured token wins — a bot token
    starts with its bot's id — else the most recently bound row. One query either way.
    """
    token_bot_id = _token_bot_id()
    preference = (
        Case(When(bot_id=token_bot_id, then=Value(0)), default=Value(1))
        if token_bot_id is not None
        else Value(1)
    )
    return (
        Bot.objects.order_by(preference, "-created_at", "-bot_id")
        .values_list("bot_id", flat=True)
        .first()
    )


def bot_id_of_token() -> int | None:
    """The id of the bot whose token is configured (a token starts with it), or None: the id
    the ``bots`` row will have once setwebhook has recorded the bot."""
    return _token_bot_id()


def _token_bot_id() -> int | None:
    token = raw_setting("TELEGRAM_BOT_TOKEN")
    if not token or ":" not in token:
        return None
    prefix = token.split(":", 1)[0]
    return int(prefix) if prefix.isdigit() else None


def verification_settings_get() -> VerificationSettings:
    """Read the three switches in one query; missing or invalid values give the defaults.

    Defaults (seed, spec §5.2): enabled, math, generation 0. Never cached: a command's switch
    takes effect on the next message.
    """
    stored: dict[str, str | None] = dict.fromkeys(VERIFICATION_KEYS)
    stored.update(Setting.objects.filter(key__in=VERIFICATION_KEYS).values_list("key", "value"))
    enabled_text = stored[VERIFY_ENABLED]
    mode_text = stored[VERIFY_MODE]
    generation_text = stored[VERIFY_GENERATION]
    return VerificationSettings(
        enabled=enabled_text != DISABLED,
        mode=mode_text if mode_text in VERIFICATION_MODES else MODE_MATH,
        generation=(
            int(generation_text)
            if generation_text is not None
            and generation_text.isascii()
            and generation_text.isdigit()
            and len(generation_text) <= GENERATION_MAX_DIGITS
            else 0
        ),
        stored=stored,
    )


def user_get(*, bot_id: int, user_id: int) -> BotUser | None:
    return BotUser.objects.filter(bot_id=bot_id, user_id=user_id).first()


def topic_get_for_user(*, bot_id: int, user_id: int) -> Topic | None:
    return Topic.objects.filter(bot_id=bot_id, user_id=user_id).first()


def relayed_message_exists(*, bot_id: int, user_id: int, private_msg_id: int) -> bool:
    """Whether the ledger records the user's private message ``private_msg_id`` as relayed."""
    return RelayedMessage.objects.filter(
        bot_id=bot_id, user_id=user_id, direction=Direction.IN, private_msg_id=private_msg_id
    ).exists()


def relayed_reply_exists(*, bot_id: int, user_id: int, group_msg_id: int) -> bool:
    """Whether the ledger records the admin's topic message ``group_msg_id`` as relayed to the
    user."""
    return RelayedMessage.objects.filter(
        bot_id=bot_id, user_id=user_id, direction=Direction.OUT, group_msg_id=group_msg_id
    ).exists()


def topic_get_for_thread(*, bot_id: int, thread_id: int) -> Topic | None:
    return Topic.objects.filter(bot_id=bot_id, thread_id=thread_id).first()


def bot_tables_missing() -> list[str]:
    """The bot's eight tables that do not exist in the current schema (one catalogue query)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select table_name from information_schema.tables "
            "where table_schema = current_schema() and table_name = any(%s)",
            [list(BOT_TABLES)],
        )
        present = {row[0] for row in cursor.fetchall()}
    return [table for table in BOT_TABLES if table not in present]


def delete_confirmation_get(*, bot_id: int, prompt_msg_id: int) -> DeleteConfirmation | None:
    return DeleteConfirmation.objects.filter(bot_id=bot_id, prompt_msg_id=prompt_msg_id).first()


def binding_exists(*, bot_id: int, user_id: int, thread_id: int) -> bool:
    """The user is bound to exactly this thread (both directions: the pair is one row)."""
    return Topic.objects.filter(bot_id=bot_id, user_id=user_id, thread_id=thread_id).exists()


def ledger_last_id(*, bot_id: int, thread_id: int) -> int | None:
    """The id of the thread's newest ledger row (None: the thread has none)."""
    return RelayedMessage.objects.filter(bot_id=bot_id, thread_id=thread_id).aggregate(
        last=Max("id")
    )["last"]


def ledger_group_message_ids(
    *, bot_id: int, thread_id: int, up_to_id: int | None, after_message_id: int
) -> list[int]:
    """The distinct group message ids of the thread's ledger rows (both directions) with a row
    id up to ``up_to_id`` and a message id above ``after_message_id``, ascending."""
    if up_to_id is None:
        return []
    message_ids = (
        RelayedMessage.objects.filter(
            bot_id=bot_id,
            thread_id=thread_id,
            id__lte=up_to_id,
            group_msg_id__gt=after_message_id,
        )
        .order_by("group_msg_id")
        .values_list("group_msg_id", flat=True)
        .distinct()
    )
    # Every one is set (``group_msg_id__gt`` leaves out the rows without one).
    return [message_id for message_id in message_ids if message_id is not None]


def bound_thread_ids(*, bot_id: int, after_thread_id: int) -> list[int]:
    """The thread ids of the bot's bindings above ``after_thread_id``, ascending."""
    return list(
        Topic.objects.filter(bot_id=bot_id, thread_id__gt=after_thread_id)
        .order_by("thread_id")
        .values_list("thread_id", flat=True)
    )


# ------------------------------------------------------------------ broadcasts


def broadcast_eligible_user_ids(*, bot_id: int, limit: int | None = None) -> list[int]:
    """The users a broadcast may go to (spec §7.2), ascending: a binding and a users row that is
    not banned. Archived users, closed topics and unverified users are included; users without a
    binding, orphan bindings and deleted users are not. At most ``limit`` ids (None: all)."""
    not_banned = BotUser.objects.filter(
        bot_id=OuterRef("bot_id"), user_id=OuterRef("user_id"), is_banned=False
    )
    ids = (
        Topic.objects.filter(Exists(not_banned), bot_id=bot_id)
        .order_by("user_id")
        .values_list("user_id", flat=True)
    )
    return list(ids if limit is None else ids[:limit])


def broadcast_get(*, bot_id: int, broadcast_id: int) -> Broadcast | None:
    return Broadcast.objects.filter(bot_id=bot_id, id=broadcast_id).first()


def broadcast_get_for_update_id(*, bot_id: int, source_update_id: int) -> Broadcast | None:
    """The broadcast the command update ``source_update_id`` started, if any."""
    return Broadcast.objects.filter(bot_id=bot_id, source_update_id=source_update_id).first()


def broadcast_draft_exists(*, bot_id: int) -> bool:
    return Broadcast.objects.filter(bot_id=bot_id, status__in=["preparing", "pending"]).exists()


# ------------------------------------------------------------------ the ledger's mapping (#24)


def relayed_message_by_private(
    *, bot_id: int, user_id: int, private_msg_id: int, direction: str
) -> RelayedMessage | None:
    """The ledger row of the message ``private_msg_id`` in the user's chat (the newest when a
    redelivery relayed it twice), or None. Read through the seed's (user_id, created_at) index."""
    return (
        RelayedMessage.objects.filter(
            bot_id=bot_id, user_id=user_id, private_msg_id=private_msg_id, direction=direction
        )
        .order_by("-id")
        .first()
    )


def relayed_message_by_group(
    *, bot_id: int, thread_id: int, group_msg_id: int, direction: str | None = None
) -> RelayedMessage | None:
    """The ledger row of the message ``group_msg_id`` in topic ``thread_id``, or None. Read
    through the seed's (thread_id, created_at) index."""
    rows = RelayedMessage.objects.filter(
        bot_id=bot_id, thread_id=thread_id, group_msg_id=group_msg_id
    )
    if direction is not None:
        rows = rows.filter(direction=direction)
    return rows.order_by("-id").first()
