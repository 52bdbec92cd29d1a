"""The Bot API methods the fake answers, with Telegram's validation and error descriptions."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from tests.fakes.telegram.records import (
    COMMAND_NAME,
    MEDIA_KINDS,
    NOT_MODIFIED,
    QUERY_TOO_OLD,
    SECRET_TOKEN,
    ApiError,
    FakeMessage,
    FakeTopic,
    bad_request,
)
from tests.fakes.telegram.state import ChatState

# The tags of the Bot API's HTML parse mode (https://core.telegram.org/bots/api#html-style).
HTML_TAGS = frozenset(
    {
        "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a",
        "tg-emoji", "code", "pre", "blockquote",
    }
)  # fmt: skip


class _EntityParser(HTMLParser):
    """Telegram's HTML parse mode: the visible text of a message, or the error it answers."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.visible: list[str] = []
        self.open: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in HTML_TAGS:
            self.error = self.error or f'Unsupported start tag "{tag}"'
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.error = self.error or f'Unmatched end tag "{tag}"'
            return
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.visible.append(data)


def parse_html(text: str) -> str:
    """The visible text of an HTML-mode message; raises 400 "can't parse entities" as Telegram
    does for unknown or unbalanced tags."""
    parser = _EntityParser()
    parser.feed(text)
    parser.close()
    if parser.error is None and parser.open:
        parser.error = f'Can\'t find end tag corresponding to start tag "{parser.open[-1]}"'
    if parser.error is not None:
        raise bad_request(f"can't parse entities: {parser.error}")
    return "".join(parser.visible)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class BotApiMethods(ChatState):
    """``_method_<lower-case name>(params) -> result`` for each method; raise ApiError to fail."""

    @staticmethod
    def _integer(params: dict, name: str) -> int:
        value = params.get(name)
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad_request(f"{name} is empty" if value is None else f"invalid {name}")
        return value

    def _chat(self, params: dict) -> int:
        chat_id = self._integer(params, "chat_id")
        if chat_id == self.support_chat_id:
            return chat_id
        if chat_id < 0:
            raise bad_request("chat not found")
        if chat_id in self._blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        if chat_id not in self._users:
            raise ApiError(403, "Forbidden: bot can't initiate conversation with a user")
        return chat_id

    def _writable_thread(self, chat_id: int, params: dict) -> int | None:
        if params.get("message_thread_id") is None:
            return None
        thread_id = self._integer(params, "message_thread_id")
        topic = self._topics.get(thread_id) if chat_id == self.support_chat_id else None
        if topic is None or topic.deleted:
            raise bad_request("message thread not found")
        if topic.closed:
            raise bad_request("TOPIC_CLOSED")
        return thread_id

    def _live_topic(self, params: dict) -> FakeTopic:
        if self._chat(params) != self.support_chat_id:
            raise bad_request("the chat is not a forum")
        topic = self._topics.get(self._integer(params, "message_thread_id"))
        if topic is None or topic.deleted:
            raise bad_request("TOPIC_ID_INVALID")
        return topic

    def _live_message(self, params: dict, missing: str) -> FakeMessage:
        chat_id = self._chat(params)
        message = self._messages.get((chat_id, self._integer(params, "message_id")))
        if message is None or message.deleted:
            raise bad_request(missing)
        return message

    @staticmethod
    def _check_markup(markup: object) -> None:
        if markup is None:
            return
        rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
        if not isinstance(rows, list):
            raise bad_request("can't parse reply keyboard markup JSON object")
        for row in rows:
            for button in row:
                data = button.get("callback_data")
                if not button.get("text") or (
                    data is not None and not 1 <= len(data.encode()) <= 64
                ):
                    raise bad_request("BUTTON_DATA_INVALID")
                web_app = button.get("web_app")
                if web_app is not None:
                    url = web_app.get("url") if isinstance(web_app, dict) else None
                    if not isinstance(url, str) or not url.startswith("https://"):
                        raise bad_request(
                            f"inline keyboard button Web App URL '{url}' is invalid: "
                            "Only HTTPS links are allowed"
                        )

    def _send(self, params: dict, kind: str) -> dict:
        chat_id = self._chat(params)
        thread_id = self._writable_thread(chat_id, params)
        self._check_markup(params.get("reply_markup"))
        html = text = None
        if kind == "text":
            text = params.get("text")
            if not isinstance(text, str):
                raise bad_request("message text is empty")
            if params.get("parse_mode") == "HTML":
                html, text = text, parse_html(text)
            elif params.get("parse_mode") is not None:
                raise bad_request(f"unsupported parse_mode {params['parse_mode']}")
            if not text.strip():
                raise bad_request("message text is empty")
            # Telegram counts the visible text in UTF-16 code units.
            if (utf16_length(text) if html is not None else len(text)) > 4096:
                raise bad_request("message is too long")
        else:
            file_id = params.get(kind)
            if not isinstance(file_id, str) or not file_id:
                raise bad_request(f"there is no {kind} in the request")
            if file_id in self.rejected_file_ids:
                raise bad_request("wrong file identifier/HTTP URL specified")
            caption = params.get("caption")
            if isinstance(caption, str) and len(caption) > 1024:
                raise bad_request("message caption is too long")
        reply_to = None
        if params.get("reply_parameters") is not None:
            reply_to = self._integer(params["reply_parameters"], "message_id")
            replied = self._messages.get((chat_id, reply_to))
            if replied is None or replied.deleted:
                if not params["reply_parameters"].get("allow_sending_without_reply"):
                    raise bad_request("message to be replied not found")
                reply_to = None  # Telegram sends it as a plain message
        message = FakeMessage(
            chat_id=chat_id,
            message_id=self._allocate_message_id(chat_id),
            thread_id=thread_id,
            sender_id=self.bot.id,
            kind=kind,
            text=text if kind == "text" else None,
            file_id=params.get(kind) if kind != "text" else None,
            caption=params.get("caption") if kind not in ("text", "sticker") else None,
            reply_markup=params.get("reply_markup"),
            html=html,
            reply_to_message_id=reply_to,
        )
        self._messages[(chat_id, message.message_id)] = message
        return self._message_json(message)

    def _method_getme(self, params: dict) -> dict:
        return {
            **self.bot.as_json(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _method_setwebhook(self, params: dict) -> bool:
        url = params.get("url")
        if not isinstance(url, str) or not url.startswith("https://"):
            raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        secret = params.get("secret_token")
        if secret is not None and not SECRET_TOKEN.fullmatch(str(secret)):
            raise bad_request("secret token contains unallowed characters")
        self.webhook = {
            "url": url,
            "secret_token": secret,
            "allowed_updates": params.get("allowed_updates"),
        }
        return True

    def _method_deletewebhook(self, params: dict) -> bool:
        self.webhook = {"url": ""}
        return True

    def _method_getwebhookinfo(self, params: dict) -> dict:
        info: dict[str, Any] = {
            "url": self.webhook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": 0,
        }
        for key in ("last_error_date", "last_error_message", "allowed_updates"):
            if self.webhook.get(key) is not None:
                info[key] = self.webhook[key]
        return info

    def _scope_key(self, params: dict) -> str:
        scope = params.get("scope") or {"type": "default"}
        if scope.get("type") == "chat":
            if self._integer(scope, "chat_id") != self.support_chat_id:
                raise bad_request("chat not found")
            return f"chat:{scope['chat_id']}"
        return str(scope.get("type"))

    def _method_setmycommands(self, params: dict) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or not 1 <= len(commands) <= 100:
            raise bad_request("commands must be a non-empty list")
        for entry in commands:
            if not COMMAND_NAME.fullmatch(str(entry.get("command", ""))):
                raise bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(entry.get("description", ""))) <= 256:
                raise bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands[self._scope_key(params)] = commands
        return True

    def _method_deletemycommands(self, params: dict) -> bool:
        self.commands.pop(self._scope_key(params), None)
        return True

    def _method_sendmessage(self, params: dict) -> dict:
        return self._send(params, "text")

    def _method_sendphoto(self, params: dict) -> dict:
        return self._send(params, "photo")

    def _method_sendvideo(self, params: dict) -> dict:
        return self._send(params, "video")

    def _method_sendanimation(self, params: dict) -> dict:
        return self._send(params, "animation")

    def _method_senddocument(self, params: dict) -> dict:
        return self._send(params, "document")

    def _method_sendvoice(self, params: dict) -> dict:
        return self._send(params, "voice")

    def _method_sendaudio(self, params: dict) -> dict:
        return self._send(params, "audio")

    def _method_sendsticker(self, params: dict) -> dict:
        return self._send(params, "sticker")

    def _method_sendmediagroup(self, params: dict) -> list[dict]:
        chat_id = self._chat(params)
        thread_id = self._writable_thread(chat_id, params)
        media = params.get("media")
        if not isinstance(media, list) or not 2 <= len(media) <= 10:
            raise bad_request("wrong number of media in the album: 2-10 are allowed")
        kinds = set()
        for item in media:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind not in ("photo", "video", "document", "audio"):
                raise bad_request("unsupported media type in the album")
            if not isinstance(item.get("media"), str) or item["media"] in self.rejected_file_ids:
                raise bad_request("wrong file identifier/HTTP URL specified")
            kinds.add(kind)
        # Documents and audio only go with their own kind (Telegram's album rules).
        if ("document" in kinds or "audio" in kinds) and len(kinds) > 1:
            raise bad_request("documents and audio can't be mixed with other media types")
        sent = []
        for item in media:
            message = FakeMessage(
                chat_id=chat_id,
                message_id=self._allocate_message_id(chat_id),
                thread_id=thread_id,
                sender_id=self.bot.id,
                kind=item["type"],
                file_id=item["media"],
                caption=item.get("caption"),
                media_group_id=f"album-{len(self._messages)}",
            )
            self._messages[(chat_id, message.message_id)] = message
            sent.append(message)
        group = sent[0].media_group_id
        for message in sent:
            message.media_group_id = group
        return [self._message_json(message) for message in sent]

    def _method_editmessagetext(self, params: dict) -> dict:
        message = self._live_message(params, "message to edit not found")
        if message.sender_id != self.bot.id:
            raise bad_request("message can't be edited")
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise bad_request("message text is empty")
        markup = params.get("reply_markup")
        self._check_markup(markup)
        # Telegram keeps the old keyboard when reply_markup is omitted; an empty one removes it.
        new_markup = message.reply_markup if markup is None else markup
        if not (new_markup or {}).get("inline_keyboard"):
            new_markup = None
        if text == message.text and new_markup == message.reply_markup:
            raise bad_request(NOT_MODIFIED.removeprefix("Bad Request: "))
        message.text = text
        message.reply_markup = new_markup
        return self._message_json(message)

    def _method_editmessagecaption(self, params: dict) -> dict:
        message = self._live_message(params, "message to edit not found")
        if message.sender_id != self.bot.id:
            raise bad_request("message can't be edited")
        if message.kind not in MEDIA_KINDS or message.kind == "sticker":
            raise bad_request("there is no caption in the message to edit")
        caption = params.get("caption") or None
        if isinstance(caption, str) and len(caption) > 1024:
            raise bad_request("message caption is too long")
        if caption == message.caption:
            raise bad_request(NOT_MODIFIED.removeprefix("Bad Request: "))
        message.caption = caption
        return self._message_json(message)

    def _method_editmessagemedia(self, params: dict) -> dict:
        message = self._live_message(params, "message to edit not found")
        if message.sender_id != self.bot.id:
            raise bad_request("message can't be edited")
        media = params.get("media")
        kind = media.get("type") if isinstance(media, dict) else None
        file_id = media.get("media") if isinstance(media, dict) else None
        if kind not in ("photo", "video", "animation", "document", "audio"):
            raise bad_request("unsupported media type")
        if message.kind not in ("photo", "video", "animation", "document", "audio"):
            raise bad_request("message can't be edited")
        if not isinstance(file_id, str) or not file_id or file_id in self.rejected_file_ids:
            raise bad_request("wrong file identifier/HTTP URL specified")
        caption = media.get("caption")
        if (kind, file_id, caption) == (message.kind, message.file_id, message.caption):
            raise bad_request(NOT_MODIFIED.removeprefix("Bad Request: "))
        message.kind, message.file_id, message.caption = kind, file_id, caption
        return self._message_json(message)

    def _method_answercallbackquery(self, params: dict) -> bool:
        callback_id = str(params.get("callback_query_id"))
        if callback_id not in self._callbacks or callback_id in self._answered:
            raise bad_request(QUERY_TOO_OLD.removeprefix("Bad Request: "))
        self._answered.add(callback_id)
        self._callbacks[callback_id] = params.get("text")
        return True

    def _method_pinchatmessage(self, params: dict) -> bool:
        message = self._live_message(params, "message to pin not found")
        pinned = self._pinned.setdefault(message.chat_id, [])
        if message.message_id not in pinned:
            pinned.append(message.message_id)
        return True

    def _method_deletemessage(self, params: dict) -> bool:
        message = self._live_message(params, "message to delete not found")
        if message.undeletable:
            raise bad_request("message can't be deleted")
        message.deleted = True
        # A deleted message is no longer pinned (Telegram unpins it).
        pinned = self._pinned.get(message.chat_id, [])
        if message.message_id in pinned:
            pinned.remove(message.message_id)
        return True

    def _method_createforumtopic(self, params: dict) -> dict:
        if self._chat(params) != self.support_chat_id:
            raise bad_request("the chat is not a forum")
        if not self.can_manage_topics:
            raise bad_request("not enough rights to create a topic")
        name = params.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise bad_request("TOPIC_TITLE_EMPTY")
        # As in Telegram, the topic's id is the id of its "topic created" service message.
        thread_id = self._allocate_message_id(self.support_chat_id)
        self._messages[(self.support_chat_id, thread_id)] = FakeMessage(
            self.support_chat_id, thread_id, thread_id, self.bot.id, "service"
        )
        self._topics[thread_id] = FakeTopic(thread_id, name)
        return {"message_thread_id": thread_id, "name": name, "icon_color": 7322096}

    def _method_closeforumtopic(self, params: dict) -> bool:
        topic = self._live_topic(params)
        if topic.closed:
            raise bad_request("TOPIC_NOT_MODIFIED")
        topic.closed = True
        return True

    def _method_reopenforumtopic(self, params: dict) -> bool:
        topic = self._live_topic(params)
        if not topic.closed:
            raise bad_request("TOPIC_NOT_MODIFIED")
        topic.closed = False
        return True

    def _method_deleteforumtopic(self, params: dict) -> bool:
        topic = self._live_topic(params)
        if topic.undeletable:
            raise bad_request("CHAT_ADMIN_REQUIRED")
        self._delete_topic(topic.thread_id)
        return True
