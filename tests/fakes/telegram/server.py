"""The fake Bot API server: HTTP routing, fault injection, holds, and the Telegram-side helpers
that build the updates a test delivers to the webhook."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer
from tests.fakes.telegram.methods import BotApiMethods
from tests.fakes.telegram.records import (
    BOT_ID,
    MESSAGE_METHODS,
    SUPPORT_CHAT_ID,
    TOKEN,
    ApiError,
    Call,
    FakeMessage,
    FakeTopic,
    FakeUser,
    Fault,
    Hold,
    RateLimit,
)


class FakeTelegram(BotApiMethods):
    """The fake Bot API of one bot and one forum supergroup (the support group)."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        bot_id: int = BOT_ID,
        bot_username: str = "hodor_test_bot",
        bot_first_name: str = "Hodor",
        support_chat_id: int = SUPPORT_CHAT_ID,
    ) -> None:
        super().__init__(
            bot=FakeUser(bot_id, bot_first_name, username=bot_username, is_bot=True),
            support_chat_id=support_chat_id,
        )
        self.token = token
        self.can_manage_topics = True
        self.rejected_file_ids: set[str] = set()
        self.webhook: dict[str, Any] = {"url": ""}
        self.commands: dict[str, list[dict]] = {}
        self._server = LocalHTTPServer(self._application)
        self._calls: list[Call] = []
        self._call_number = 0
        self._faults: list[Fault] = []
        self._holds: dict[str, Hold] = {}
        self._rate_limits: list[RateLimit] = []
        # When a call arrives (its rate-limit windows count on it); tests of the fake's own
        # windows put a clock they move here instead of sleeping through a window.
        self.clock: Callable[[], float] = time.monotonic
        self._update_ids = itertools.count(700_000_001)
        self._callback_ids = itertools.count(9_000_001)

    def reset(self) -> None:
        """Back to a fresh Telegram (for a fake shared by several tests, e.g. the Celery
        worker's): chats, topics, calls, faults, holds, rate limits, webhook and menus.
        Update and callback ids keep counting, so they stay unique."""
        with self._lock:
            for hold in self._holds.values():
                hold.release()
            self._reset_chats()
            self.can_manage_topics = True
            self.rejected_file_ids = set()
            self.webhook = {"url": ""}
            self.commands = {}
            self._calls = []
            self._faults = []
            self._holds = {}
            self._rate_limits = []
            self.clock = time.monotonic

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeTelegram:
        self._server.start()
        return self

    def stop(self) -> None:
        with self._lock:
            for hold in self._holds.values():
                hold.release()
        self._server.stop()

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def api_base(self) -> str:
        return self._server.url

    # ------------------------------------------------------------------ inspection

    def calls(self, method: str | None = None) -> list[Call]:
        """Every API call received, in order (failed and injected-fault calls included)."""
        with self._lock:
            return [c for c in self._calls if method is None or c.method == method]

    def methods(self) -> list[str]:
        return [call.method for call in self.calls()]

    def forget_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def topic(self, thread_id: int) -> FakeTopic:
        with self._lock:
            return self._topics[thread_id]

    def topics(self) -> list[FakeTopic]:
        with self._lock:
            return list(self._topics.values())

    def bot_messages(self, chat_id: int, *, thread_id: int | None = None) -> list[FakeMessage]:
        """The bot's live (not deleted) messages in a chat (and topic), oldest first; service
        messages (a topic's creation) left out."""
        with self._lock:
            return [
                message
                for (chat, _), message in sorted(self._messages.items())
                if chat == chat_id
                and message.sender_id == self.bot.id
                and not message.deleted
                and message.kind != "service"
                and (thread_id is None or message.thread_id == thread_id)
            ]

    def topic_messages(self, thread_id: int) -> list[FakeMessage]:
        return self.bot_messages(self.support_chat_id, thread_id=thread_id)

    def message(self, chat_id: int, message_id: int) -> FakeMessage:
        with self._lock:
            return self._messages[(chat_id, message_id)]

    def pinned(self, chat_id: int | None = None) -> list[int]:
        with self._lock:
            return list(self._pinned.get(self.support_chat_id if chat_id is None else chat_id, []))

    def callback_answer(self, callback_id: str) -> str | None:
        with self._lock:
            return self._callbacks.get(callback_id)

    # ------------------------------------------------------------------ the Telegram side

    def user(
        self,
        user_id: int,
        first_name: str = "",
        *,
        last_name: str | None = None,
        username: str | None = None,
    ) -> FakeUser:
        return FakeUser(user_id, first_name, last_name=last_name, username=username)

    def private_message(self, user: FakeUser, **content: Any) -> dict:
        """The update of ``user`` writing to the bot (text=…, photo=<file_id>, caption=…, …)."""
        with self._lock:
            self._users[user.id] = user
            message_id = self._allocate_message_id(user.id)
            fields = self._content_fields(content)
            self._store_incoming(user.id, message_id, None, user.id, content)
        message = {
            "message_id": message_id,
            "from": user.as_json(),
            "chat": {"id": user.id, "first_name": user.first_name, "type": "private"},
            "date": int(time.time()),
            **fields,
        }
        return {"update_id": next(self._update_ids), "message": message}

    def group_message(self, sender: FakeUser, *, thread_id: int | None, **content: Any) -> dict:
        """The update of ``sender`` writing in the support group (thread_id None = General)."""
        with self._lock:
            message_id = self._allocate_message_id(self.support_chat_id)
            fields = self._content_fields(content)
            self._store_incoming(self.support_chat_id, message_id, thread_id, sender.id, content)
        message = {
            "message_id": message_id,
            "from": sender.as_json(),
            "chat": self._chat_json(self.support_chat_id),
            "date": int(time.time()),
            **fields,
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        return {"update_id": next(self._update_ids), "message": message}

    def edit_private_message(self, user: FakeUser, message_id: int, **content: Any) -> dict:
        """The update of ``user`` editing their message ``message_id`` to ``content``."""
        return self._edit(user.id, message_id, None, user, content)

    def edit_group_message(
        self, sender: FakeUser, message_id: int, *, thread_id: int, **content: Any
    ) -> dict:
        """The update of ``sender`` editing their message ``message_id`` in a topic."""
        return self._edit(self.support_chat_id, message_id, thread_id, sender, content)

    def _edit(
        self, chat_id: int, message_id: int, thread_id: int | None, sender: FakeUser, content: dict
    ) -> dict:
        with self._lock:
            fields = self._content_fields(content)
            self._store_incoming(chat_id, message_id, thread_id, sender.id, content)
            chat = self._chat_json(chat_id)
        message = {
            "message_id": message_id,
            "from": sender.as_json(),
            "chat": chat,
            "date": int(time.time()) - 60,
            "edit_date": int(time.time()),
            **fields,
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        return {"update_id": next(self._update_ids), "edited_message": message}

    def click(
        self, user: FakeUser, *, message_id: int, data: str, chat_id: int | None = None
    ) -> dict:
        """The update of ``user`` pressing a button (``data``) under a message of the bot."""
        chat_id = user.id if chat_id is None else chat_id
        with self._lock:
            callback_id = str(next(self._callback_ids))
            self._callbacks[callback_id] = None
            stored = self._messages.get((chat_id, message_id))
            message = (
                self._message_json(stored)
                if stored is not None
                else {
                    "message_id": message_id,
                    "chat": self._chat_json(chat_id),
                    "date": int(time.time()),
                }
            )
        callback = {
            "id": callback_id,
            "from": user.as_json(),
            "message": message,
            "chat_instance": "-5550001",
            "data": data,
        }
        return {"update_id": next(self._update_ids), "callback_query": callback}

    def close_topic_by_hand(self, thread_id: int, by: FakeUser) -> dict:
        """An admin closes the topic in Telegram; returns the service-message update."""
        with self._lock:
            self._topics[thread_id].closed = True
        return self._topic_service_update(thread_id, by, "forum_topic_closed")

    def reopen_topic_by_hand(self, thread_id: int, by: FakeUser) -> dict:
        with self._lock:
            self._topics[thread_id].closed = False
        return self._topic_service_update(thread_id, by, "forum_topic_reopened")

    def create_topic_by_hand(self, name: str) -> int:
        """A topic that exists in the group already (e.g. created before a test); its id."""
        with self._lock:
            return self._method_createforumtopic({"chat_id": self.support_chat_id, "name": name})[
                "message_thread_id"
            ]

    def delete_topic_by_hand(self, thread_id: int) -> None:
        """An admin deletes the topic in Telegram (no update is sent for that)."""
        with self._lock:
            self._delete_topic(thread_id)

    def met(self, *users: FakeUser) -> None:
        """Users who wrote to the bot before (the bot may message them), without an update."""
        with self._lock:
            for user in users:
                self._users[user.id] = user

    def block(self, user_id: int) -> None:
        with self._lock:
            self._blocked.add(user_id)

    def unblock(self, user_id: int) -> None:
        """The user unblocked the bot: it may message them again."""
        with self._lock:
            self._blocked.discard(user_id)

    def set_webhook_error(self, message: str) -> None:
        with self._lock:
            self.webhook["last_error_date"] = int(time.time())
            self.webhook["last_error_message"] = message

    # ------------------------------------------------------------------ fault injection

    def fail(
        self,
        method: str | None,
        *,
        status: int = 500,
        description: str | None = None,
        retry_after: int | None = None,
        times: int = 1,
        mode: str = "envelope",
    ) -> None:
        """Make the next ``times`` calls of ``method`` (None: of any method) fail, unapplied."""
        with self._lock:
            self._faults.append(
                Fault(
                    method.lower() if method else None,
                    None,
                    status,
                    description,
                    retry_after,
                    times,
                    mode,
                )
            )

    def clear_faults(self) -> None:
        """Forget the faults not yet taken (``fail`` / ``fail_call`` that no call met)."""
        with self._lock:
            self._faults.clear()

    def fail_call(
        self,
        number: int,
        *,
        status: int = 500,
        description: str | None = None,
        retry_after: int | None = None,
        mode: str = "envelope",
    ) -> None:
        """Make the ``number``-th call from now (1-based, any method) fail, unapplied."""
        with self._lock:
            self._faults.append(
                Fault(None, self._call_number + number, status, description, retry_after, 1, mode)
            )

    def limit_rate(self, per_second: int, *, methods: tuple[str, ...] = ("deleteMessage",)) -> None:
        """Enforce flood control from now on: at most ``per_second`` calls of ``methods`` into
        one chat per second; beyond that Telegram's 429 "Too Many Requests: retry after N"
        (with ``parameters.retry_after``), nothing applied. Off unless a test turns it on."""
        with self._lock:
            self._rate_limits.append(RateLimit(per_second, frozenset(m.lower() for m in methods)))

    def limit_global_rate(self, per_second: int, *, methods: tuple[str, ...]) -> None:
        """As ``limit_rate``, for the bot's calls of ``methods`` into all chats together (the
        ~30 messages a second Telegram allows a bot). Off unless a test turns it on."""
        with self._lock:
            self._rate_limits.append(
                RateLimit(per_second, frozenset(m.lower() for m in methods), per_chat=False)
            )

    def enforce_telegram_limits(
        self,
        *,
        per_second: int = 30,
        chat_interval: float = 1.0,
        group_per_window: int = 20,
        group_window: float = 60.0,
    ) -> None:
        """Telegram's three limits on messages (MESSAGE_METHODS) from now on, as a bot meets
        them: ``per_second`` in all chats together, one per ``chat_interval`` into any chat,
        ``group_per_window`` per ``group_window`` into a group (20 a minute; topic creation
        counts). Tests scale the windows down to stay fast."""
        methods = frozenset(method.lower() for method in MESSAGE_METHODS)
        with self._lock:
            self._rate_limits.extend(
                [
                    RateLimit(per_second, methods, per_chat=False),
                    RateLimit(1, methods, window=chat_interval),
                    RateLimit(group_per_window, methods, window=group_window, groups_only=True),
                ]
            )

    def rate_limited_calls(self) -> list[Call]:
        """The calls answered 429 by a rate limit or an injected fault, in order."""
        return [call for call in self.calls() if call.status == 429]

    def delete_message_by_hand(self, chat_id: int, message_id: int) -> None:
        """An admin deletes the message in Telegram (no update is sent for that)."""
        with self._lock:
            self._messages[(chat_id, message_id)].deleted = True

    def make_undeletable(self, chat_id: int, message_id: int) -> None:
        """The bot may not delete this message (deleteMessage: "message can't be deleted")."""
        with self._lock:
            self._messages[(chat_id, message_id)].undeletable = True

    def make_topic_undeletable(self, thread_id: int) -> None:
        """deleteForumTopic of this topic is refused (the bot lacks the right)."""
        with self._lock:
            self._topics[thread_id].undeletable = True

    def bot_sends(self, chat_id: int, *, text: str, thread_id: int | None = None) -> int:
        """A message the bot sent earlier (e.g. a relayed copy in a topic); its message id."""
        with self._lock:
            params = {"chat_id": chat_id, "text": text, "message_thread_id": thread_id}
            return self._method_sendmessage(params)["message_id"]

    def hold(self, method: str) -> Hold:
        hold = Hold()
        with self._lock:
            self._holds[method.lower()] = hold
        return hold

    # ------------------------------------------------------------------ HTTP

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application()
        application.router.add_route("*", "/bot{token}/{method}", self._handle)
        return application

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method_name = request.match_info["method"]
        method = method_name.lower()
        params = await self._read_params(request)
        call = Call(method=method_name, params=params, at=self.clock())
        with self._lock:
            self._call_number += 1
            number = self._call_number
            self._calls.append(call)
            fault = self._take_fault(method, number)
            hold = self._holds.pop(method, None) if fault is None else None
            limited = self._over_rate_limit(method, params, call.at) if fault is None else None
        if hold is not None:
            hold.arrived.set()
            await asyncio.get_running_loop().run_in_executor(None, hold.released.wait, 30)
        if request.match_info["token"] != self.token:
            return self._error(call, ApiError(401, "Unauthorized"))
        if fault is not None:
            return self._fault_response(call, request, fault)
        if limited is not None:
            return self._error(call, limited)
        handler = getattr(self, f"_method_{method}", None)
        if handler is None:
            return self._error(call, ApiError(404, "Not Found"))
        try:
            with self._lock:
                result = handler(params)
        except ApiError as error:
            return self._error(call, error)
        call.status, call.result = 200, result
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    async def _read_params(request: web.Request) -> dict:
        body = await request.read()
        if not body:
            return dict(request.query)
        if request.content_type == "application/json":
            try:
                parsed = json.loads(body)
            except ValueError:
                return {}
            return parsed if isinstance(parsed, dict) else {}
        return dict(await request.post())

    @staticmethod
    def _error(call: Call, error: ApiError) -> web.Response:
        call.status = error.status
        envelope: dict[str, Any] = {
            "ok": False,
            "error_code": error.status,
            "description": error.description,
        }
        if error.retry_after is not None:
            envelope["parameters"] = {"retry_after": error.retry_after}
        call.error = envelope
        return web.json_response(envelope, status=error.status)

    def _over_rate_limit(self, method: str, params: dict, now: float) -> ApiError | None:
        """The 429 of a call over a configured rate limit, else None (the call is counted)."""
        chat_id = params.get("chat_id")
        in_group = isinstance(chat_id, int) and chat_id < 0
        applying = [
            limit
            for limit in self._rate_limits
            if method in limit.methods and (in_group or not limit.groups_only)
        ]
        windows = []
        for limit in applying:
            key = chat_id if limit.per_chat else None
            accepted = [at for at in limit.accepted.get(key, []) if at > now - limit.window]
            limit.accepted[key] = accepted
            if len(accepted) >= limit.per_second:
                retry_after = max(1, math.ceil(accepted[0] + limit.window - now))
                return ApiError(
                    429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after
                )
            windows.append(accepted)
        for accepted in windows:
            accepted.append(now)
        return None

    def _take_fault(self, method: str, number: int) -> Fault | None:
        for fault in self._faults:
            matches = (
                fault.at_call == number
                if fault.at_call is not None
                else fault.method in (None, method)
            )
            if matches and fault.remaining > 0:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _fault_response(self, call: Call, request: web.Request, fault: Fault) -> web.StreamResponse:
        if fault.mode == "disconnect":
            call.status = -1
            request.transport.abort()
            return web.Response(status=500)
        if fault.mode == "without_ok":
            call.status = 200
            return web.json_response({"result": True})
        if fault.mode == "html":
            call.status = fault.status
            return web.Response(
                status=fault.status,
                text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                content_type="text/html",
            )
        if fault.status == 429:
            retry_after = 5 if fault.retry_after is None else fault.retry_after
            description = fault.description or f"Too Many Requests: retry after {retry_after}"
            return self._error(call, ApiError(429, description, retry_after=fault.retry_after))
        default = {500: "Internal Server Error", 502: "Bad Gateway"}.get(fault.status, "Error")
        return self._error(call, ApiError(fault.status, fault.description or default))
