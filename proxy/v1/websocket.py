"""The client-facing WebSocket at ``/v1/responses`` (what the Codex CLI speaks with
``supports_websockets = true``), as a channels consumer.

The upgrade carries the client key (``Authorization: Bearer``); a missing or unknown key is
refused with HTTP 401 before the socket is accepted. Then each ``{"type":"response.create",
…body…}`` text frame is one ``/v1/responses`` stream request — the same parsing, the same
``Dispatch`` (scheduler, slots, failover before the first output, ledger) — and each upstream
event goes back as one JSON text frame. Requests run one after another on a socket (a frame
that arrives while an answer is still running waits for it); an error
is a ``{"type":"error","status":N,"error":{…}}`` frame (OpenAI shape) and the socket stays
open. A ``previous_response_id`` of the socket's latest response with ``store:false`` reaches the
same pooled upstream socket (connection-local continuation, ``proxy.clients.codex.ws_pool``).
Frames are limited to ``V1_MAX_BODY_BYTES`` (16 MiB, like the HTTP body); the client leaving
cancels the upstream read and frees the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from proxy import json_parse
from proxy.dispatch.client_errors import ClientError, ClientFailure
from proxy.dispatch.dispatcher import Dispatch
from proxy.dispatch.sse import stream_disconnected_event
from proxy.dispatch.types import DispatchRequest
from proxy.dispatch.upstream_request import InvalidHeaderValue, read_client_identity
from proxy.v1.auth import KeyLookupUnavailable, authenticate
from proxy.v1.common import ALLOWED_SUBAGENTS, ValidRequest, model_catalog_or_404, resolved
from proxy.v1.errors import (
    DATABASE_UNAVAILABLE,
    INTERNAL,
    INVALID_REQUEST,
    MISSING_KEY,
    UNENCODABLE_TEXT,
    request_id_from,
)
from proxy.v1.failures import record_unexpected_failure
from proxy.v1.responses import _apply_subagent

logger = logging.getLogger(__name__)

ROUTE = "/v1/responses"
FRAME_TOO_LARGE = ClientError(
    413, "invalid_request_error", "request_too_large", "Frame exceeds the 16 MiB limit"
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


def _as_error(raw) -> dict:
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        return {"error": raw["error"]}
    return {"error": {"message": str(raw), "type": "invalid_request_error", "code": None}}


class ResponsesSocket(AsyncWebsocketConsumer):
    """One client socket; ``self._running`` is the request being answered, if any."""

    async def websocket_connect(self, message) -> None:
        self._headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in self.scope.get("headers", [])
        }
        self._running: asyncio.Task | None = None
        try:
            client = await authenticate(self._headers.get("authorization"))
        except KeyLookupUnavailable:
            await self._refuse(DATABASE_UNAVAILABLE)
            return
        if client is None:
            await self._refuse(MISSING_KEY)
            return
        await self.accept()

    async def _refuse(self, error: ClientError) -> None:
        """Answer the upgrade with an HTTP error instead of accepting it (ASGI's
        websocket.http.response extension; a server without it answers 403)."""
        body = json.dumps(error.body()).encode()
        if "websocket.http.response" in self.scope.get("extensions", {}):
            await self.base_send(
                {
                    "type": "websocket.http.response.start",
                    "status": error.status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await self.base_send({"type": "websocket.http.response.body", "body": body})
        else:
            await self.close()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        data = text_data if text_data is not None else bytes_data
        if data is not None and len(data) > settings.V1_MAX_BODY_BYTES:
            await self.send(error_frame(FRAME_TOO_LARGE))
            return
        # One request at a time: a frame sent while the previous answer is still finishing
        # (its last event is out, its slot not yet released) waits for it.
        self._running = asyncio.get_running_loop().create_task(
            self._answer_after(self._running, data)
        )

    async def _answer_after(self, previous: asyncio.Task | None, data) -> None:
        if previous is not None and not previous.done():
            with contextlib.suppress(Exception):
                await previous
        await self._answer(data)

    async def disconnect(self, code) -> None:
        # The client left: the upstream read is cancelled, the slot freed (relay's finally).
        if self._running is not None and not self._running.done():
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._running

    async def _answer(self, data) -> None:
        request_id = request_id_from(None)
        try:
            dispatch = await self._parse(data, request_id)
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

    async def _parse(self, data, request_id: str) -> Dispatch:
        """The frame as a ``/v1/responses`` stream request (spec §1.4 order: key, JSON object,
        model, catalog). The key is read again: a key disabled since the upgrade stops here."""
        try:
            client = await authenticate(self._headers.get("authorization"))
        except KeyLookupUnavailable:
            raise ClientFailure(DATABASE_UNAVAILABLE) from None
        if client is None:
            raise ClientFailure(MISSING_KEY)
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
                body_bytes=len(data) if data is not None else 0,
            )
        )
