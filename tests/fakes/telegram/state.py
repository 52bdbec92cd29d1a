"""The chat state behind the fake Bot API and the helpers that render it as Telegram JSON."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.fakes.telegram.records import MEDIA_KINDS, FakeMessage, FakeTopic, FakeUser


class ChatState:
    """What Telegram remembers of the bot's chats: message ids, messages, topics, users, pins."""

    def __init__(self, *, bot: FakeUser, support_chat_id: int) -> None:
        self.bot = bot
        self.support_chat_id = support_chat_id
        self._lock = threading.RLock()
        self._reset_chats()

    def _reset_chats(self) -> None:
        """Forget every chat, message, topic, user, callback and pin (a fresh Telegram)."""
        self._next_message_id: dict[int, int] = {self.support_chat_id: 100}
        self._messages: dict[tuple[int, int], FakeMessage] = {}
        self._topics: dict[int, FakeTopic] = {}
        self._users: dict[int, FakeUser] = {}
        self._blocked: set[int] = set()
        self._callbacks: dict[str, str | None] = {}  # id -> answered text (None: unanswered)
        self._answered: set[str] = set()
        self._pinned: dict[int, list[int]] = {}

    def _allocate_message_id(self, chat_id: int) -> int:
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        return message_id

    @staticmethod
    def _content_fields(content: dict) -> dict:
        fields: dict[str, Any] = {}
        for key, value in content.items():
            if key == "photo":
                fields["photo"] = [
                    {"file_id": f"{value}-small", "file_unique_id": "s", "width": 90, "height": 90},
                    {"file_id": value, "file_unique_id": "b", "width": 1280, "height": 960},
                ]
            elif key in MEDIA_KINDS:
                fields[key] = {"file_id": value, "file_unique_id": f"u-{value}"}
            else:
                fields[key] = value
        return fields

    def _store_incoming(
        self, chat_id: int, message_id: int, thread_id: int | None, sender_id: int, content: dict
    ) -> None:
        kind = next((key for key in ("text", *MEDIA_KINDS) if key in content), "other")
        self._messages[(chat_id, message_id)] = FakeMessage(
            chat_id=chat_id,
            message_id=message_id,
            thread_id=thread_id,
            sender_id=sender_id,
            kind=kind,
            text=content.get("text"),
            file_id=content.get(kind) if kind in MEDIA_KINDS else None,
            caption=content.get("caption"),
        )

    def _chat_json(self, chat_id: int) -> dict:
        if chat_id == self.support_chat_id:
            return {"id": chat_id, "title": "Support", "type": "supergroup", "is_forum": True}
        user = self._users.get(chat_id)
        return {"id": chat_id, "first_name": user.first_name if user else "", "type": "private"}

    def _message_json(self, message: FakeMessage) -> dict:
        sender = (
            self.bot if message.sender_id == self.bot.id else self._users.get(message.sender_id)
        )
        body: dict[str, Any] = {
            "message_id": message.message_id,
            "from": (sender or FakeUser(message.sender_id)).as_json(),
            "chat": self._chat_json(message.chat_id),
            "date": int(time.time()),
        }
        if message.thread_id is not None:
            body["message_thread_id"] = message.thread_id
            body["is_topic_message"] = True
        if message.kind == "text":
            body["text"] = message.text
        elif message.kind in MEDIA_KINDS:
            body.update(self._content_fields({message.kind: message.file_id}))
        if message.caption is not None:
            body["caption"] = message.caption
        if message.reply_markup:
            body["reply_markup"] = message.reply_markup
        return body

    def _topic_service_update(self, thread_id: int, by: FakeUser, event: str) -> dict:
        with self._lock:
            message_id = self._allocate_message_id(self.support_chat_id)
        message = {
            "message_id": message_id,
            "from": by.as_json(),
            "chat": self._chat_json(self.support_chat_id),
            "date": int(time.time()),
            "message_thread_id": thread_id,
            "is_topic_message": True,
            event: {},
        }
        return {"update_id": next(self._update_ids), "message": message}

    def _delete_topic(self, thread_id: int) -> None:
        self._topics[thread_id].deleted = True
        for message in self._messages.values():
            if message.chat_id == self.support_chat_id and message.thread_id == thread_id:
                message.deleted = True
        pinned = self._pinned.get(self.support_chat_id, [])
        self._pinned[self.support_chat_id] = [
            message_id
            for message_id in pinned
            if self._messages[(self.support_chat_id, message_id)].thread_id != thread_id
        ]
