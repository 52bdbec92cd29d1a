"""Update classification (spec §1.7): a pure function, run before any side effect.

The update is untrusted JSON: any shape violation classifies as ``ignore``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from bots.conf import MAX_SAFE_INTEGER

# Telegram's General topic. Messages in General carry no message_thread_id; General commands are
# normalised to this id, and replies to it are sent without message_thread_id (sending with
# message_thread_id=1 fails with "message thread not found").
GENERAL_THREAD_ID = 1

# Commands accepted in General (case-sensitive, after stripping an @botname suffix).
GENERAL_COMMANDS = frozenset(
    {
        "/verifyon",
        "/verifyoff",
        "/verifymode",
        "/verifymode_math",
        "/verifymode_button",
        "/verifymode_turnstile",
        "/help",
    }
)


class UpdateKind(enum.StrEnum):
    INBOUND = "inbound"  # a user's private message
    OUTBOUND = "outbound"  # a message in a support-group topic (or a General command)
    CALLBACK = "callback"  # a button press in a private chat (verification)
    GROUP_CALLBACK = "group_callback"  # a button press in the support group
    TOPIC_EVENT = "topic_event"  # native forum_topic_closed / forum_topic_reopened
    BROADCAST = "broadcast"  # /broadcast in General
    EDIT_INBOUND = "edit_inbound"  # a user edited a private message (issue #24)
    EDIT_OUTBOUND = "edit_outbound"  # a message in a support-group topic was edited
    IGNORE = "ignore"


@dataclass(frozen=True)
class Classification:
    kind: UpdateKind
    # OUTBOUND and TOPIC_EVENT: the topic's thread id (GENERAL_THREAD_ID for General commands).
    thread_id: int | None = None


IGNORE = Classification(UpdateKind.IGNORE)


def is_integer(value: object) -> TypeGuard[int]:
    """A JSON integer within the safe range (booleans are not integers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_SAFE_INTEGER


def is_positive_integer(value: object) -> TypeGuard[int]:
    return is_integer(value) and value > 0


def first_token(text: str) -> str:
    parts = text.split(maxsplit=1)
    return parts[0] if parts else ""


def command_name(text: str) -> str:
    """The first token of ``text`` without its ``@botname`` suffix (``/help@bot`` → ``/help``)."""
    return first_token(text).split("@", 1)[0]


def classify_update(update: object, support_chat_id: int | None) -> Classification:
    """Classify an update for ``webhook.route_update``; no SUPPORT_CHAT_ID (None) ⇒ ignore."""
    if support_chat_id is None or not isinstance(update, Mapping):
        return IGNORE
    if "callback_query" in update:
        return _classify_callback(update["callback_query"], support_chat_id)
    if "edited_message" in update:
        return _classify_edit(update["edited_message"], support_chat_id)
    message = update.get("message")
    if not isinstance(message, Mapping):
        return IGNORE
    chat = message.get("chat")
    if not isinstance(chat, Mapping) or not is_integer(chat.get("id")):
        return IGNORE
    if chat.get("type") == "private":
        return Classification(UpdateKind.INBOUND)
    if chat["id"] != support_chat_id:
        return IGNORE
    return _classify_group_message(message)


def _classify_edit(message: object, support_chat_id: int) -> Classification:
    """An edited message: a user's in their private chat, or one in a support-group topic."""
    if not isinstance(message, Mapping) or not is_positive_integer(message.get("message_id")):
        return IGNORE
    sender = message.get("from")
    chat = message.get("chat")
    if not isinstance(sender, Mapping) or not is_positive_integer(sender.get("id")):
        return IGNORE
    if not isinstance(chat, Mapping) or not is_integer(chat.get("id")):
        return IGNORE
    if chat.get("type") == "private":
        return Classification(UpdateKind.EDIT_INBOUND)
    thread_id = message.get("message_thread_id")
    if chat["id"] == support_chat_id and is_positive_integer(thread_id):
        return Classification(UpdateKind.EDIT_OUTBOUND, thread_id=thread_id)
    return IGNORE


def _classify_callback(callback: object, support_chat_id: int) -> Classification:
    if not isinstance(callback, Mapping) or not isinstance(callback.get("id"), str):
        return IGNORE
    sender = callback.get("from")
    message = callback.get("message")
    if not isinstance(sender, Mapping) or not is_integer(sender.get("id")):
        return IGNORE
    if not isinstance(message, Mapping) or not is_integer(message.get("message_id")):
        return IGNORE
    chat = message.get("chat")
    if not isinstance(chat, Mapping) or not is_integer(chat.get("id")):
        return IGNORE
    if not isinstance(chat.get("type"), str):
        return IGNORE
    if chat["type"] == "private":
        return Classification(UpdateKind.CALLBACK)
    if chat["id"] == support_chat_id:
        return Classification(UpdateKind.GROUP_CALLBACK)
    return IGNORE


def _classify_group_message(message: Mapping[str, Any]) -> Classification:
    thread_id = message.get("message_thread_id")
    if "forum_topic_closed" in message or "forum_topic_reopened" in message:
        closed = isinstance(message.get("forum_topic_closed"), Mapping)
        reopened = isinstance(message.get("forum_topic_reopened"), Mapping)
        if (
            is_positive_integer(message.get("message_id"))
            and is_positive_integer(thread_id)
            and closed != reopened
        ):
            return Classification(UpdateKind.TOPIC_EVENT, thread_id=thread_id)
        return IGNORE
    if "message_thread_id" in message:
        if is_positive_integer(thread_id):
            return Classification(UpdateKind.OUTBOUND, thread_id=thread_id)
        return IGNORE  # present but invalid (0, a string, ...)
    # General: only /broadcast and the General commands are meant for the bot.
    text = message.get("text")
    if not is_positive_integer(message.get("message_id")) or not isinstance(text, str):
        return IGNORE
    token = first_token(text)
    if token == "/broadcast" or token.startswith("/broadcast@"):
        return Classification(UpdateKind.BROADCAST)
    if command_name(text) in GENERAL_COMMANDS:
        return Classification(UpdateKind.OUTBOUND, thread_id=GENERAL_THREAD_ID)
    return IGNORE
