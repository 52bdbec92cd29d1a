"""The Bot API client every web request and job of the bot uses: each call that sends, edits or
deletes first takes a permit from the shared limiter (``bots.outbound.limiter``).

* The call's priority is the one in force where it is made (``outbound_priority``): live by
  default, ``Priority.CARD`` around card edits, ``Priority.BULK`` around purges and wipes (the
  broadcast's send loop takes its permits itself, with a client of its own that is not paced).
* A webhook has a **budget** (``TELEGRAM_SEND_BUDGET_MS`` for the whole update): a call that
  cannot get its permit before the budget ends is not made and raises ``NoSendPermit`` (a
  ``TelegramRetryableError``) — the webhook answers 500 and Telegram redelivers the update (the
  idempotency claim keeps it exactly-once). A call below live priority (a card edit) waits at
  most a quarter of the budget, leaving the rest to the update's relay. Jobs wait as long as a
  call's own timeout allows.
* While a call waits for its permit, the thread's database connection goes back to the pool
  (outside a transaction): a burst of webhooks waiting their turn in the support group must
  not hold every pooled connection and starve the requests that need one (the proxy, the
  admin, the webhooks that do have a permit). The next query takes a connection again.
* A 429 is learned: its ``retry_after`` blocks the bucket for every process (the group's, or the
  bot's), and a short one (≤ IN_PLACE_RETRY_MAX_SECONDS) is retried once in place — after the
  limiter lets the call through again, inside the same budget.
* A ``guard`` (an update's inbox lease, ``bots.services.inbox.InboxLease.keep``) runs before
  every call and while a call waits for its permit: it keeps the lease alive, and raises —
  the call not made — once the update is another holder's.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeGuard

from django.db import connection

from bots.clients.telegram import (
    IN_PLACE_RETRY_MAX_SECONDS,
    TelegramClient,
    TelegramRetryableError,
)
from bots.outbound.limiter import OutboundLimiter, Permit, Priority
from common import clock

# Messages: they take the destination chat's bucket (one a second; 20 a minute in a group).
COUNTED_METHODS = frozenset(
    {
        "sendMessage", "sendPhoto", "sendVideo", "sendAnimation", "sendDocument", "sendVoice",
        "sendAudio", "sendSticker", "sendMediaGroup", "copyMessage", "editMessageText",
        "editMessageCaption", "editMessageMedia", "editMessageReplyMarkup", "createForumTopic",
    }
)  # fmt: skip
# Other chat actions: no bucket, but blocks and priorities hold them back (limiter docstring).
GLOBAL_ONLY_METHODS = frozenset(
    {
        "deleteMessage", "deleteMessages", "pinChatMessage", "unpinChatMessage",
        "closeForumTopic", "reopenForumTopic", "deleteForumTopic", "editForumTopic",
    }
)  # fmt: skip
# A 429 without retry_after (Telegram always sends one; never trust that) blocks this long.
DEFAULT_RETRY_AFTER_SECONDS = 1
# A job's call waits at most this long for its permit (a group's minute, and then some).
JOB_PERMIT_TIMEOUT_SECONDS = 90.0
# The share of an update's budget one call below live priority may wait (a best-effort card
# edit must not spend the time the update's relay needs).
LOWER_PRIORITY_SHARE = 0.25

_priority: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "outbound_priority", default=Priority.LIVE
)


@contextlib.contextmanager
def outbound_priority(priority: Priority) -> Iterator[None]:
    """Calls made inside take ``priority`` (live relays, card edits, bulk work)."""
    token = _priority.set(priority)
    try:
        yield
    finally:
        _priority.reset(token)


def current_priority() -> Priority:
    return _priority.get()


class NoSendPermit(TelegramRetryableError):
    """The call was not made: no permit came within the budget (retry later).
    ``wait_seconds``: how long the limiter saw the wait ahead (a hint for when to try again)."""

    def __init__(self, *, method: str, wait_seconds: float = 0.0) -> None:
        super().__init__(method=method, status=None, description="no send permit within the budget")
        self.wait_seconds = wait_seconds


class PacedTelegramClient(TelegramClient):
    """A TelegramClient whose chat calls go through the shared limiter (module docstring).

    ``budget_seconds``: the time every call of this client together may wait for permits (a
    webhook's update); None: each call waits up to JOB_PERMIT_TIMEOUT_SECONDS (a job).
    ``guard``: run before every call and during permit waits (module docstring).
    """

    def __init__(
        self,
        *,
        limiter: OutboundLimiter,
        budget_seconds: float | None = None,
        monotonic: Callable[[], float] = clock.monotonic,
        guard: Callable[[], None] | None = None,
        **client_options: Any,
    ) -> None:
        super().__init__(**client_options)
        self.limiter = limiter
        self._guard = guard
        self._monotonic = monotonic
        self._budget = budget_seconds
        self._deadline = None if budget_seconds is None else monotonic() + budget_seconds

    def __repr__(self) -> str:
        return f"PacedTelegramClient(api_base={self._api_base!r})"

    def call(self, method: str, parameters: Mapping[str, Any] | None = None) -> Any:
        """As ``TelegramClient.call``, under the limiter. Raises TelegramRetryableError when no
        permit came within the budget (the call was not made)."""
        if self._guard is not None:
            self._guard()
        payload = {key: value for key, value in (parameters or {}).items() if value is not None}
        chat_id = payload.get("chat_id")
        counted = method in COUNTED_METHODS
        if not (counted or method in GLOBAL_ONLY_METHODS) or not _is_chat_id(chat_id):
            return super().call(method, parameters)
        attempts = 2 if self._in_place_retry else 1
        # An album counts as its items (Telegram counts each message).
        media = payload.get("media") if method == "sendMediaGroup" else None
        weight = len(media) if isinstance(media, list) else 1
        for attempt in range(1, attempts + 1):
            permit = self._permit(method, chat_id, counted=counted, weight=weight)
            try:
                return self._attempt(method, payload)
            except TelegramRetryableError as error:
                if error.status != 429:
                    raise
                seconds = error.retry_after or DEFAULT_RETRY_AFTER_SECONDS
                self.limiter.learn_retry_after(chat_id=chat_id, seconds=seconds)
                if (
                    attempt == attempts
                    or error.retry_after is None
                    or error.retry_after > IN_PLACE_RETRY_MAX_SECONDS
                ):
                    raise
            finally:
                self.limiter.release(permit)
        raise AssertionError("unreachable")  # pragma: no cover

    def _permit(self, method: str, chat_id: int, *, counted: bool, weight: int = 1) -> Permit:
        priority = current_priority()
        if self._deadline is None or self._budget is None:
            timeout = JOB_PERMIT_TIMEOUT_SECONDS
        else:
            timeout = max(0.0, self._deadline - self._monotonic())
            if priority != Priority.LIVE:
                timeout = min(timeout, self._budget * LOWER_PRIORITY_SHARE)
        permit = self.limiter.acquire(
            chat_id=chat_id,
            priority=priority,
            timeout=timeout,
            counted=counted,
            weight=weight,
            on_wait=self._while_waiting,
        )
        if permit is None:
            raise NoSendPermit(method=method, wait_seconds=self.limiter.last_refusal_wait)
        return permit

    def _while_waiting(self, seconds: float = 0.0) -> None:
        if self._guard is not None:
            self._guard()
        release_database_connection(seconds)


def release_database_connection(seconds: float = 0.0) -> None:
    """Give this thread's database connection back to the pool while it waits (module
    docstring). Inside a transaction nothing is done: the transaction needs its connection."""
    if connection.connection is not None and not connection.in_atomic_block:
        connection.close()


def _is_chat_id(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
