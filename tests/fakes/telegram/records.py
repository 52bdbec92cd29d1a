"""The fake Bot API's records: users, messages, topics, calls, faults, and its error type."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

TOKEN = "4242424242:AAE-fake-token-for-tests_0123456789"
BOT_ID = 4242424242
SUPPORT_CHAT_ID = -1001234567890
MEDIA_KINDS = ("photo", "video", "animation", "document", "voice", "audio", "sticker")
SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")

NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
QUERY_TOO_OLD = "Bad Request: query is too old and response timeout expired or query ID is invalid"


class ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


def bad_request(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


@dataclass
class FakeUser:
    id: int
    first_name: str = ""
    last_name: str | None = None
    username: str | None = None
    is_bot: bool = False

    def as_json(self) -> dict:
        body: dict[str, Any] = {"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name}
        if self.last_name is not None:
            body["last_name"] = self.last_name
        if self.username is not None:
            body["username"] = self.username
        return body


@dataclass
class FakeMessage:
    chat_id: int
    message_id: int
    thread_id: int | None
    sender_id: int
    kind: str  # text, a media kind, or "service"
    text: str | None = None
    file_id: str | None = None
    caption: str | None = None
    reply_markup: dict | None = None
    # parse_mode HTML: what the bot sent (``text`` is what the reader sees, tags and entities
    # parsed as Telegram does).
    html: str | None = None
    reply_to_message_id: int | None = None
    media_group_id: str | None = None  # an album's items share it
    deleted: bool = False
    # The bot may not delete it (deleteMessage: "message can't be deleted"), e.g. an admin's
    # message while the bot lacks the "delete messages" right.
    undeletable: bool = False


@dataclass
class FakeTopic:
    thread_id: int
    name: str
    closed: bool = False
    deleted: bool = False
    # deleteForumTopic is refused ("CHAT_ADMIN_REQUIRED"): the bot lacks the right for it.
    undeletable: bool = False


@dataclass
class Call:
    method: str  # as Telegram names it (sendMessage, ...)
    params: dict
    status: int = 0  # the HTTP status the fake answered
    result: Any = None
    at: float = 0.0  # time.monotonic() when the call arrived
    error: dict | None = None  # the error envelope the fake answered, if any

    @property
    def retry_after(self) -> int | None:
        return ((self.error or {}).get("parameters") or {}).get("retry_after")

    @property
    def ok(self) -> bool:
        return self.status == 200


def most_in_one_second(arrivals: list[float]) -> int:
    """The most of ``arrivals`` (ascending times, seconds) within any one-second window."""
    most, start = 0, 0
    for end, at in enumerate(arrivals):
        while arrivals[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


@dataclass
class Fault:
    method: str | None  # lower-cased method, or None for "any method"
    at_call: int | None  # the absolute call number it fires at, or None for "the next ones"
    status: int
    description: str | None
    retry_after: int | None
    remaining: int
    # "envelope" (JSON error), "html" (non-JSON body), "without_ok" (200, JSON without "ok"),
    # "disconnect" (the connection is dropped)
    mode: str


# The Bot API methods Telegram counts as messages against its limits (sends, edits, topics).
MESSAGE_METHODS = (
    "sendMessage", "sendPhoto", "sendVideo", "sendAnimation", "sendDocument", "sendVoice",
    "sendAudio", "sendSticker", "sendMediaGroup", "copyMessage", "editMessageText",
    "editMessageCaption", "editMessageMedia", "editMessageReplyMarkup", "createForumTopic",
)  # fmt: skip


@dataclass
class RateLimit:
    """Telegram's flood control, as a test configures it: at most ``per_second`` accepted calls
    of ``methods`` into one chat (``per_chat``) or into all chats together in any ``window``
    (one second unless said otherwise); the next gets 429 with retry_after. ``groups_only``:
    the limit counts only calls into groups (negative chat ids)."""

    per_second: int
    methods: frozenset[str]  # lower-cased method names
    per_chat: bool = True
    window: float = 1.0
    groups_only: bool = False
    # chat id (or None for all chats together) -> arrival times of the accepted calls
    accepted: dict[int | None, list[float]] = field(default_factory=dict)


@dataclass
class Hold:
    """Pauses the next call of a method until released (to make two requests overlap)."""

    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def wait_until_arrived(self, timeout: float = 10) -> bool:
        return self.arrived.wait(timeout)

    def release(self) -> None:
        self.released.set()
