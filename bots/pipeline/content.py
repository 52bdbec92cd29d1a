"""The eight relayable content types (spec §2.1): extraction and re-sending by ``file_id``.

Media are never downloaded: the relay re-sends Telegram's ``file_id`` with the caption. Formatting
entities, reply links, forward origins and media metadata are not carried over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bots.clients.telegram import TelegramClient

# Probed in this order after text; a message with an animation also carries a document.
MEDIA_KINDS = ("video", "animation", "document", "voice", "audio", "sticker")


@dataclass(frozen=True)
class Content:
    kind: str  # text, photo, video, animation, document, voice, audio or sticker
    text: str | None = None
    file_id: str | None = None
    caption: str | None = None

    @property
    def is_text(self) -> bool:
        return self.kind == "text"


def _file_id(media: object) -> str | None:
    if isinstance(media, Mapping):
        file_id = media.get("file_id")
        if isinstance(file_id, str) and file_id:
            return file_id
    return None


def _caption(message: Mapping[str, Any]) -> str | None:
    caption = message.get("caption")
    return caption if isinstance(caption, str) and caption else None


def _largest_photo(sizes: object) -> str | None:
    """The file id of the widest size (ties: the later one); None if that one is unusable."""
    if not isinstance(sizes, list) or not sizes:
        return None
    best = None
    best_width = None
    for size in sizes:
        width = size.get("width") if isinstance(size, Mapping) else None
        width = width if isinstance(width, int) and not isinstance(width, bool) else -1
        if best_width is None or width >= best_width:
            best, best_width = size, width
    return _file_id(best)


def extract_content(message: Mapping[str, Any]) -> Content | None:
    """The relayable content of ``message``, or None (unsupported: finish silently)."""
    text = message.get("text")
    if isinstance(text, str) and text:
        return Content(kind="text", text=text)
    photo = _largest_photo(message.get("photo"))
    if photo is not None:
        return Content(kind="photo", file_id=photo, caption=_caption(message))
    for kind in MEDIA_KINDS:
        file_id = _file_id(message.get(kind))
        if file_id is not None:
            caption = None if kind == "sticker" else _caption(message)
            return Content(kind=kind, file_id=file_id, caption=caption)
    return None


def send_content(
    client: TelegramClient,
    content: Content,
    *,
    chat_id: int,
    message_thread_id: int | None = None,
    reply_to_message_id: int | None = None,
) -> dict[str, Any]:
    """Send ``content`` as a new message of the bot; return Telegram's Message.

    ``reply_to_message_id``: the message it answers (a mapped reply); sent as a plain message
    when that one is gone (``allow_sending_without_reply``)."""
    if content.is_text:
        assert content.text is not None  # extract_content gives every text content its text
        return client.send_message(
            chat_id=chat_id,
            text=content.text,
            message_thread_id=message_thread_id,
            reply_to_message_id=reply_to_message_id,
            reply_even_if_gone=True,
        )
    assert content.file_id is not None  # and every media content its file
    return client.send_media(
        kind=content.kind,
        chat_id=chat_id,
        file_id=content.file_id,
        caption=content.caption,
        message_thread_id=message_thread_id,
        reply_to_message_id=reply_to_message_id,
    )
