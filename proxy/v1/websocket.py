"""The client-facing WebSocket at ``/v1/responses`` (what the Codex CLI speaks with
``supports_websockets = true``), as a channels consumer.

The upgrade carries the client key (``Authorization: Bearer``); a missing or unknown key is
refused with HTTP 401 before the socket is accepted. Then each ``{"type":"response.create",
…body…}`` text frame is one ``/v1/responses`` stream request — the same parsing, the same
``Dispatch`` (scheduler, slots, failover before the first output, ledger) — and each upstream
event goes back as one JSON text frame. Requests run one after another on a socket: one frame
that arrives while an answer is still running waits for it — its key's policy (allowed models,
requests and tokens windows, concurrency, budgets) checked on arrival, read-only, the running
request's own in-flight entry not counted, and for real when it runs — and any frame beyond
that one is refused at once with a 429 ``request_already_waiting`` error frame and dropped, so
a flood of frames costs the worker no more than two frames' memory (issue 35 item 3). An error
is a ``{"type":"error","status":N,"error":{…}}`` frame (OpenAI shape) and the socket stays
open. A ``previous_response_id`` of the socket's latest response with ``store:false`` reaches the
same pooled upstream socket (connection-local continuation, ``proxy.clients.codex.ws_pool``).

Frames are limited as HTTP bodies are: the server refuses a frame over ``V1_MAX_BODY_BYTES``
(16 MiB) from its header, before reading it (close 1009, ``config/run.py``); the check here is
for a server run without that limit. A frame taken holds its size of the process's body memory
(``proxy.v1.body_memory``) until it is answered. The client leaving cancels the upstream read
and frees the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from proxy import json_parse
from proxy.dispatch.dispatcher import Dispatch
from proxy.domain.client_errors import ClientError, ClientFailure
from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.sse import stream_disconnected_event
from proxy.domain.upstream_request import InvalidHeaderValue, read_client_identity
from proxy.models_catalog import resolve_alias
from proxy.policies import admission
from proxy.v1.auth import AuthenticatedClient, KeyLookupUnavailable, KeyRefused, authenticate
from proxy.v1.body_memory import SERVER_BUSY, BodyHold
from proxy.v1.common import ALLOWED_SUBAGENTS, ValidRequest, model_catalog_or_404, resolved
from proxy.v1.errors import (
    DATABASE_UNAVAILABLE,
    INTERNAL,
    INVALID_REQUEST,
    KEY_REFUSALS,
    UNENCODABLE_TEXT,
    request_id_from,
)
from proxy.v1.failures import record_unexpected_failure
from proxy.v1.responses import _apply_subagent

if TYPE_CHECKING:
    from asgiref.typing import (
        WebSocketConnectEvent,
        WebSocketResponseBodyEvent,
        WebSocketResponseStartEvent,
    )

logger = logging.getLogger(__name__)

ROUTE = "/v1/responses"
FRAME_TOO_LARGE = ClientError(
    413, "invalid_request_error", "request_too_large", "Frame exceeds the 16 MiB limit"
)
# The frame being answered and one waiting behind it; a frame beyond them is refused.
ACCEPTED_FRAMES = 2
ALREADY_WAITING = ClientError(
    429,
    "rate_limit_error",
    "request_already_waiting",
    "A request is already waiting on this socket behind the one in progress; send the next "
    "one when an answer ends",
)


def error_frame(error: ClientError) -> str:
    """The error frame of ``error``: an upstream error passed through verbatim when it is one
    (its raw body), else the OpenAI envelope with the status."""
    if error.raw_body:
        with contextlib.suppress(ValueError):
            raw = json.loads(error.raw_body)
            if isinstance(raw, dict) and raw.get("type") == "error":
                return json.dumps(raw)
            return json.dumps({"type": "error", "status": error.status, **_as_error(raw)})
    return json.dumps({"type": "error", "status": error.status, **error.body()})


def _as_error(raw: object) -> dict[str, Any]:
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        return {"error": raw["error"]}
    return {"error": {"message": str(raw), "type": "invalid_request_error", "code": None}}


class ResponsesSocket(AsyncWebsocketConsumer):
    """One client socket. ``self._accepted``: the frames it has taken and not yet answered —
    at most ``ACCEPTED_FRAMES`` (the one being answered and one waiting behind it)."""

    async def websocket_connect(self, message: WebSocketConnectEvent) -> None:
        self._headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in self.scope.get("headers", [])
        }
        self._accepted: list[asyncio.Task[None]] = []
        # The request being answered (for the waiting frame's policy check) and the latest
        # reading of the key (its policy, its aliases).
        self._running: DispatchRequest | None = None
        try:
            client = await authenticate(self._headers.get("authorization"))
        except KeyRefused as refused:
            await self._refuse(KEY_REFUSALS[refused.reason])
            return
        except KeyLookupUnavailable:
            await self._refuse(DATABASE_UNAVAILABLE)
            return
        self._client: AuthenticatedClient = client
        await self.accept()

    async def _refuse(self, error: ClientError) -> None:
        """Answer the upgrade with an HTTP error instead of accepting it (ASGI's
        websocket.http.response extension; a server without it answers 403)."""
        body = json.dumps(error.body()).encode()
        if "websocket.http.response" in (self.scope.get("extensions") or {}):
            start: WebSocketResponseStartEvent = {
                "type": "websocket.http.response.start",
                "status": error.status,
                "headers": [(b"content-type", b"application/json")],
            }
            await self.base_send(start)
            # more_body said (False, ASGI's default): the event's type wants every key.
            end: WebSocketResponseBodyEvent = {
                "type": "websocket.http.response.body",
                "body": body,
                "more_body": False,
            }
            await self.base_send(end)
        else:
            await self.close()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        data = text_data if text_data is not None else bytes_data
        size = len(data) if data is not None else 0
        if size > settings.V1_MAX_BODY_BYTES:
            await self.send(error_frame(FRAME_TOO_LARGE))
            return
        # Requests run one after another on a socket; one frame may wait behind the one being
        # answered (the Codex CLI sends the next as soon as the last event is out, before the
        # slot is released). Any further frame is refused at once and dropped: nothing queues
        # without bound.
        self._accepted = [task for task in self._accepted if not task.done()]
        if len(self._accepted) >= ACCEPTED_FRAMES:
            await self.send(error_frame(ALREADY_WAITING))
            return
        hold = BodyHold()
        if not hold.grow_to(size):
            await self.send(error_frame(SERVER_BUSY))
            return
        previous = self._accepted[-1] if self._accepted else None
        self._accepted.append(
            asyncio.get_running_loop().create_task(self._answer(data, previous, hold))
        )

    async def disconnect(self, code: int) -> None:
        # The client left: the upstream read is cancelled, the slot freed (relay's finally).
        accepted = [task for task in self._accepted if not task.done()]
        for task in accepted:
            task.cancel()
        for task in accepted:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _answer(
        self, data: str | bytes | None, previous: asyncio.Task[None] | None, hold: BodyHold
    ) -> None:
        """Answer one frame. Following ``previous`` (still running), the frame is parsed and
        its key's policy checked at once — a refusal is its answer now — and then it waits;
        it is dispatched (and admitted for real) once ``previous`` has ended."""
        request_id = request_id_from(None)
        try:
            body = _frame_body(data)
            data = None  # the parsed body is what the request keeps
            if previous is not None and not previous.done():
                model = resolve_alias(body["model"], self._client.aliases)
                refused = await admission.refusal_on_arrival(
                    self._client.policy, model, following=self._running
                )
                if refused is not None:
                    raise ClientFailure(refused.error, retry_after=refused.retry_after_seconds)
                await asyncio.wait([previous])  # however it ended
            dispatch = await self._dispatch(body, request_id, body_bytes=hold.size)
            self._running = dispatch.request
            relay = await dispatch.stream()
            async for _, frames in relay.chunks():
                for frame in frames:
                    if frame.data and frame.data != b"[DONE]":
                        await self.send(frame.data.decode("utf-8", "replace"))
            if relay.end.synthetic_failure or relay.end.server_shutdown:
                event = stream_disconnected_event(
                    relay.committed.progress.response_id, relay.end.stream_error
                )
                await self.send(event.split(b"data: ", 1)[1].strip().decode())
        except ClientFailure as failure:
            await self.send(error_frame(failure.error))
        except InvalidHeaderValue:
            await self.send(error_frame(INVALID_REQUEST))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.exception("websocket /v1/responses request failed")
            client_address = self.scope.get("client") or (None,)
            record_unexpected_failure(
                error,
                request_id=request_id,
                route=ROUTE,
                client_ip=client_address[0],
                user_agent=self._headers.get("user-agent"),
            )
            with contextlib.suppress(Exception):
                await self.send(error_frame(INTERNAL))
        finally:
            hold.release()

    async def _dispatch(
        self, body: dict[str, Any], request_id: str, *, body_bytes: int
    ) -> Dispatch:
        """The frame's body as a ``/v1/responses`` stream request (the key, then the catalog).
        The key is read again: a key disabled since the upgrade stops here."""
        try:
            client = await authenticate(self._headers.get("authorization"))
        except KeyRefused as refused:
            raise ClientFailure(KEY_REFUSALS[refused.reason]) from None
        except KeyLookupUnavailable:
            raise ClientFailure(DATABASE_UNAVAILABLE) from None
        self._client = client
        requested_model = body["model"]
        valid = ValidRequest(request_id=request_id, client=client, body=body)
        catalog = await model_catalog_or_404(valid, requested_model)
        use_websocket = body.pop("use_websocket", None)
        body["model"] = resolved(requested_model, valid)
        header_subagent = self._headers.get("x-openai-subagent")
        subagent = header_subagent if header_subagent in ALLOWED_SUBAGENTS else None
        _apply_subagent(body, subagent)
        body["stream"] = True
        client_address = self.scope.get("client") or (None,)
        return Dispatch(
            DispatchRequest(
                request_id=request_id,
                route=ROUTE,
                requested_model=requested_model,
                model=body["model"],
                body=body,
                stream=True,
                scheduler_settings=client.scheduler_settings,
                fingerprint=client.fingerprint,
                client_identity=read_client_identity(
                    body, self._headers, client_key_id=client.key_id
                ),
                client_api_key_id=client.key_id,
                client_ip=client_address[0],
                user_agent=self._headers.get("user-agent"),
                subagent=subagent,
                use_websocket=use_websocket if isinstance(use_websocket, bool) else None,
                catalog=catalog,
                accounts=client.accounts,
                key_policy=client.policy,
                body_bytes=body_bytes,
            )
        )


def _frame_body(data: str | bytes | None) -> dict[str, Any]:
    """The body of a ``{"type":"response.create", …}`` frame (its fields but ``type``), with a
    non-empty string ``model``; raises ClientFailure (400) otherwise."""
    try:
        frame = json_parse.client_loads(data) if data is not None else None
    except json_parse.UnencodableText:
        raise ClientFailure(UNENCODABLE_TEXT) from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ClientFailure(INVALID_REQUEST) from None
    if not isinstance(frame, dict) or frame.get("type") != "response.create":
        raise ClientFailure(INVALID_REQUEST)
    body = {key: value for key, value in frame.items() if key != "type"}
    requested_model = body.get("model")
    if not isinstance(requested_model, str) or not requested_model.strip():
        raise ClientFailure(INVALID_REQUEST)
    return body
