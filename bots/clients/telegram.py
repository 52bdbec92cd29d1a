"""Every Telegram Bot API call of the bot, with one result classification (spec §8.2, §8.3).

A call returns Telegram's ``result`` or raises:

* ``TelegramRetryableError`` — 5xx, 429 (beyond the one in-place retry), network failure, a body
  that is not JSON or a JSON body without ``ok``. The webhook answers 500 so Telegram redelivers.
* ``TelegramPermanentError`` — 2xx with ``ok: false`` and every other 4xx (400, 403 "bot was
  blocked by the user", ...). Callers log and drop; never a 5xx.

The token is part of every request URL (``/bot<token>/<method>``). It never appears in an error:
texts are built only from the method name, the HTTP status and Telegram's ``description`` (with
the token scrubbed out should Telegram ever echo it), and the underlying ``requests`` exception,
whose text holds the URL, is neither kept nor chained.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests

from bots.clients.outgoing import outgoing_session

logger = logging.getLogger(__name__)

# (connect, read) seconds. The webhook relays inline, so a call must finish well within the time
# Telegram waits for the webhook's answer.
DEFAULT_TIMEOUT = (5.0, 15.0)
# A 429 asking to wait at most this long is retried once in place (spec §8.2); longer waits are
# left to Telegram's redelivery.
IN_PLACE_RETRY_MAX_SECONDS = 3

MEDIA_METHODS = {
    "photo": "sendPhoto",
    "video": "sendVideo",
    "animation": "sendAnimation",
    "document": "sendDocument",
    "voice": "sendVoice",
    "audio": "sendAudio",
    "sticker": "sendSticker",
}

_session: requests.Session | None = None
_session_lock = threading.Lock()


def shared_session() -> requests.Session:
    """The process's pooled HTTP session for the Bot API (created on first use)."""
    global _session
    with _session_lock:
        if _session is None:
            # No automatic retries (the builder's rule): urllib3 would log the URL (with the
            # token) when retrying, and retrying is this module's decision (the single in-place
            # 429 retry).
            _session = outgoing_session(
                timeout=DEFAULT_TIMEOUT, pool_connections=4, pool_maxsize=16
            )
        return _session


class TelegramError(Exception):
    """A failed Bot API call. ``str(error)`` is safe to log and to show (no token, no URL)."""

    permanent: bool = False

    def __init__(
        self,
        *,
        method: str,
        status: int | None,
        description: str,
        error_code: int | None = None,
        retry_after: int | None = None,
    ) -> None:
        self.method = method
        self.status = status
        self.description = description
        self.error_code = error_code
        self.retry_after = retry_after
        where = f"HTTP {status}" if status is not None else "network error"
        super().__init__(f"{method} {where}: {description}")


class TelegramRetryableError(TelegramError):
    permanent = False


class TelegramPermanentError(TelegramError):
    permanent = True


# ------------------------------------------------------------------ description sub-cases (§8.3)


def _description(error: TelegramError) -> str:
    return error.description.lower() if error.permanent else ""


def is_topic_gone(error: TelegramError) -> bool:
    """The forum topic was deleted (Telegram sends no event for that; only later calls fail).

    TOPIC_CLOSED is deliberately not "gone", and anything unsure (e.g. the bot removed from the
    group) is not gone either: a binding is never deleted because of a recoverable problem.
    """
    text = _description(error)
    return "message thread not found" in text or "topic_id_invalid" in text


def is_topic_closed(error: TelegramError) -> bool:
    return "topic_closed" in _description(error)


def is_topic_not_modified(error: TelegramError) -> bool:
    """Closing a closed topic or reopening an open one: already in the target state."""
    return "topic_not_modified" in _description(error)


def is_message_to_delete_missing(error: TelegramError) -> bool:
    return "message to delete not found" in _description(error)


def is_message_not_modified(error: TelegramError) -> bool:
    return "message is not modified" in _description(error)


def is_recipient_unreachable(error: TelegramError) -> bool:
    """A private chat the bot can no longer write to: the user blocked the bot, deleted their
    account ("user is deactivated"), or never wrote to it ("chat not found", 403 "can't
    initiate conversation"). Permanent, and the same for every later message to them."""
    text = _description(error)
    return error.permanent and (
        error.status == 403 or "chat not found" in text or "user is deactivated" in text
    )


# ------------------------------------------------------------------ client


def _reply_parameters(message_id: int | None, even_if_gone: bool) -> dict | None:
    if message_id is None:
        return None
    if even_if_gone:
        return {"message_id": message_id, "allow_sending_without_reply": True}
    return {"message_id": message_id}


class TelegramClient:
    """Bot API over a pooled ``requests`` session; POST JSON to ``<api_base>/bot<token>/<m>``."""

    def __init__(
        self,
        *,
        token: str,
        api_base: str,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        in_place_retry: bool = True,
    ) -> None:
        self._token = token
        self._in_place_retry = in_place_retry
        self._api_base = api_base.rstrip("/")
        self._session = session or shared_session()
        self._sleep = sleep
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"TelegramClient(api_base={self._api_base!r})"

    def call(self, method: str, parameters: Mapping[str, Any] | None = None) -> Any:
        """Call ``method`` and return its ``result``.

        Raises TelegramRetryableError or TelegramPermanentError (see the module docstring).
        """
        payload = {key: value for key, value in (parameters or {}).items() if value is not None}
        try:
            return self._attempt(method, payload)
        except TelegramRetryableError as error:
            if not self._in_place_retry or error.status != 429 or error.retry_after is None:
                raise
            if error.retry_after > IN_PLACE_RETRY_MAX_SECONDS:
                raise
            logger.info("telegram %s: 429, retrying once in %ss", method, error.retry_after)
            self._sleep(error.retry_after)
            return self._attempt(method, payload)

    def _attempt(self, method: str, payload: dict[str, Any]) -> Any:
        try:
            response = self._session.post(
                f"{self._api_base}/bot{self._token}/{method}",
                json=payload,
                timeout=self._timeout,
                allow_redirects=False,
            )
        except requests.RequestException as error:
            # The exception's text names the URL, token included: keep only its class name, and
            # raise outside this block so that it is not even kept as the error's __context__.
            failure = type(error).__name__
        else:
            return self._classify(method, response)
        raise TelegramRetryableError(method=method, status=None, description=failure)

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "<token>") if self._token else text

    def _classify(self, method: str, response: requests.Response) -> Any:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        envelope = body if isinstance(body, dict) else {}
        description = envelope.get("description")
        description = self._scrub(description) if isinstance(description, str) else ""
        error_code = envelope.get("error_code")
        error_code = error_code if isinstance(error_code, int) else None

        if 200 <= status < 300:
            if body is None:
                raise TelegramRetryableError(
                    method=method, status=status, description="response is not JSON"
                )
            if envelope.get("ok") is True:
                return envelope.get("result")
            if envelope.get("ok") is False:
                raise TelegramPermanentError(
                    method=method,
                    status=status,
                    description=description or "ok: false",
                    error_code=error_code,
                )
            raise TelegramRetryableError(
                method=method, status=status, description="response without ok"
            )
        if status == 429:
            parameters = envelope.get("parameters")
            retry_after = parameters.get("retry_after") if isinstance(parameters, dict) else None
            retry_after = retry_after if isinstance(retry_after, int) and retry_after >= 0 else None
            raise TelegramRetryableError(
                method=method,
                status=status,
                description=description or "Too Many Requests",
                error_code=429,
                retry_after=retry_after,
            )
        if 400 <= status < 500:
            raise TelegramPermanentError(
                method=method,
                status=status,
                description=description or ("response is not JSON" if body is None else ""),
                error_code=status,
            )
        # 5xx, and anything unexpected (1xx/3xx): try again later.
        raise TelegramRetryableError(
            method=method,
            status=status,
            description=description or ("response is not JSON" if body is None else ""),
            error_code=error_code,
        )

    # -------------------------------------------------------------- methods the bot uses

    def get_me(self) -> dict:
        return self.call("getMe")

    def set_webhook(self, *, url: str, secret_token: str, allowed_updates: list[str]) -> bool:
        return self.call(
            "setWebhook",
            {"url": url, "secret_token": secret_token, "allowed_updates": allowed_updates},
        )

    def delete_webhook(self) -> bool:
        return self.call("deleteWebhook")

    def get_webhook_info(self) -> dict:
        return self.call("getWebhookInfo")

    def set_my_commands(self, *, commands: list[dict], scope: dict) -> bool:
        return self.call("setMyCommands", {"commands": commands, "scope": scope})

    def delete_my_commands(self, *, scope: dict) -> bool:
        return self.call("deleteMyCommands", {"scope": scope})

    def send_message(
        self,
        *,
        chat_id: int,
        text: str,
        message_thread_id: int | None = None,
        reply_markup: dict | None = None,
        parse_mode: str | None = None,
        reply_to_message_id: int | None = None,
        reply_even_if_gone: bool = False,
    ) -> dict:
        """``parse_mode="HTML"`` only for broadcasts; ``reply_to_message_id`` is sent as
        ``reply_parameters`` (``reply_even_if_gone``: sent as a plain message when the replied
        message no longer exists, instead of failing)."""
        return self.call(
            "sendMessage",
            {
                "chat_id": chat_id,
                "message_thread_id": message_thread_id,
                "text": text,
                "parse_mode": parse_mode,
                "reply_markup": reply_markup,
                "reply_parameters": _reply_parameters(reply_to_message_id, reply_even_if_gone),
            },
        )

    def send_media(
        self,
        *,
        kind: str,
        chat_id: int,
        file_id: str,
        caption: str | None = None,
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
    ) -> dict:
        """sendPhoto / sendVideo / ... by ``file_id`` (media are never downloaded); a reply
        falls back to a plain message when the replied message is gone."""
        return self.call(
            MEDIA_METHODS[kind],
            {
                "chat_id": chat_id,
                "message_thread_id": message_thread_id,
                kind: file_id,
                # Stickers take no caption.
                "caption": caption if kind != "sticker" else None,
                "reply_parameters": _reply_parameters(reply_to_message_id, True),
            },
        )

    def send_media_group(
        self, *, chat_id: int, media: list[dict], message_thread_id: int | None = None
    ) -> list[dict]:
        """An album: 2–10 ``InputMedia`` (``{"type", "media": file_id, "caption"?}``); returns
        the sent Messages in order."""
        return self.call(
            "sendMediaGroup",
            {"chat_id": chat_id, "message_thread_id": message_thread_id, "media": media},
        )

    def edit_message_text(
        self, *, chat_id: int, message_id: int, text: str, reply_markup: dict | None = None
    ) -> dict:
        # Omitting reply_markup keeps the old keyboard; pass {"inline_keyboard": []} to drop it.
        return self.call(
            "editMessageText",
            {
                "chat_id": chat_id,
                "message_id": message_id,
                "text": text,
                "reply_markup": reply_markup,
            },
        )

    def edit_message_caption(self, *, chat_id: int, message_id: int, caption: str) -> dict:
        return self.call(
            "editMessageCaption", {"chat_id": chat_id, "message_id": message_id, "caption": caption}
        )

    def edit_message_media(
        self, *, chat_id: int, message_id: int, kind: str, file_id: str, caption: str | None
    ) -> dict:
        """Replace a photo, video, animation, document or audio by ``file_id`` (``kind``)."""
        media = {"type": kind, "media": file_id}
        if caption is not None:
            media["caption"] = caption
        return self.call(
            "editMessageMedia", {"chat_id": chat_id, "message_id": message_id, "media": media}
        )

    def answer_callback_query(self, *, callback_query_id: str, text: str | None = None) -> bool:
        return self.call(
            "answerCallbackQuery", {"callback_query_id": callback_query_id, "text": text}
        )

    def pin_chat_message(self, *, chat_id: int, message_id: int) -> bool:
        return self.call(
            "pinChatMessage",
            {"chat_id": chat_id, "message_id": message_id, "disable_notification": True},
        )

    def delete_message(self, *, chat_id: int, message_id: int) -> bool:
        return self.call("deleteMessage", {"chat_id": chat_id, "message_id": message_id})

    def create_forum_topic(self, *, chat_id: int, name: str) -> dict:
        return self.call("createForumTopic", {"chat_id": chat_id, "name": name})

    def close_forum_topic(self, *, chat_id: int, message_thread_id: int) -> bool:
        return self.call(
            "closeForumTopic", {"chat_id": chat_id, "message_thread_id": message_thread_id}
        )

    def reopen_forum_topic(self, *, chat_id: int, message_thread_id: int) -> bool:
        return self.call(
            "reopenForumTopic", {"chat_id": chat_id, "message_thread_id": message_thread_id}
        )

    def delete_forum_topic(self, *, chat_id: int, message_thread_id: int) -> bool:
        return self.call(
            "deleteForumTopic", {"chat_id": chat_id, "message_thread_id": message_thread_id}
        )
