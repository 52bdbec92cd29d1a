"""A fake Telegram Bot API on a real local HTTP server (``tests.fakes.http_server``).

It speaks the wire format of ``https://api.telegram.org/bot<token>/<method>``: JSON envelopes
``{"ok":true,"result":…}`` and ``{"ok":false,"error_code":…,"description":…}`` with Telegram's
own error descriptions, and keeps the state the bot's behaviour depends on:

* message ids per chat (a topic's thread id is the id of its creation service message, as in
  Telegram), the messages themselves (text, media file_id, caption, keyboard), pins, deletions;
* forum topics: open, closed (sends fail with ``TOPIC_CLOSED``), deleted by hand (sends fail with
  "message thread not found", topic methods with ``TOPIC_ID_INVALID``), General (thread id 1 is
  rejected like Telegram does);
* users who blocked the bot (403), users the bot never met (403), callback queries (answerable
  once), the webhook registration and the command menus.

Messages sent with ``parse_mode`` HTML are parsed as Telegram does (unknown or unbalanced tags are
refused with "can't parse entities"; ``text`` is the visible text, ``html`` what was sent, and
the 4096 limit counts the visible text's UTF-16 code units); ``reply_parameters`` must name a
live message of the chat.

Tests drive it from both sides: ``private_message`` / ``group_message`` / ``click`` build the
updates Telegram would deliver (allocating real message ids), and ``fail`` / ``fail_call`` /
``hold`` inject 429/5xx/network faults or pause a method; ``limit_rate`` (per chat) and
``limit_global_rate`` (all chats together) turn on Telegram's flood control, off by default;
``enforce_telegram_limits`` turns on all three of Telegram's limits on messages at once (30 a
second in all, one a second per chat, 20 a minute per group — windows scalable for tests).
``calls()`` lists every API call in arrival order (with its arrival time), failed ones included.
"""

from tests.fakes.telegram.records import (
    BOT_ID,
    MESSAGE_METHODS,
    SUPPORT_CHAT_ID,
    TOKEN,
    Call,
    FakeMessage,
    FakeTopic,
    FakeUser,
    Hold,
    most_in_one_second,
)
from tests.fakes.telegram.server import FakeTelegram

__all__ = [
    "BOT_ID",
    "SUPPORT_CHAT_ID",
    "TOKEN",
    "Call",
    "FakeMessage",
    "FakeTelegram",
    "FakeTopic",
    "FakeUser",
    "Hold",
    "MESSAGE_METHODS",
    "most_in_one_second",
]
