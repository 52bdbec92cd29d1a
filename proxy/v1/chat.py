"""``POST /v1/chat/completions``: Chat Completions bridged to the Responses upstream.

The request is translated (``proxy.chat``), then dispatched exactly like ``/v1/responses`` —
same scheduler, failover and ledger (route ``/v1/chat/completions``, the requested model kept).
The upstream always streams; one ``ChatStreamTranslator`` is fed its events either way, and a
non-stream client gets the translator's ``chat.completion`` (text from the deltas, the terminal
output only as the fallback, legacy rule §1.9). Errors use the OpenAI envelope with their HTTP
status, also for streams that fail before their first chunk (chat clients expect JSON there,
not a Responses event).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.http import HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from common import clock
from proxy.chat import ChatStreamTranslator, chat_request_to_responses
from proxy.dispatch.dispatcher import Dispatch
from proxy.dispatch.relay import StreamEnding, StreamRelay
from proxy.domain.dispatch_types import Committed
from proxy.domain.sse import DONE_FRAME, SERVER_SHUTDOWN_MESSAGE, Frame
from proxy.v1.common import (
    build_dispatch_request,
    event_stream_response,
    model_catalog_or_404,
    resolved,
    validate,
    with_upstream_headers,
)
from proxy.v1.errors import openai_errors
from proxy.v1.idempotency import idempotent
from proxy.v1.request import V1Request, v1_view

ROUTE = "/v1/chat/completions"
STREAM_CUT_MESSAGE = "Upstream stream closed before response.completed"


def _frame(chunk: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


def _events(frames: list[Frame]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(type, event)`` of each upstream frame; ``[DONE]``, keep-alives and non-JSON data are
    skipped."""
    for frame in frames:
        if not frame.data or frame.data == b"[DONE]":
            continue
        try:
            event = frame.json()
        except ValueError:
            continue
        if isinstance(event, dict):
            yield frame.event or event.get("type", ""), event


@csrf_exempt
@require_POST
@openai_errors
@v1_view
async def chat_completions(request: V1Request) -> HttpResponseBase:
    valid = await validate(request)
    plan = chat_request_to_responses(valid.body)  # raises ChatRequestInvalid
    catalog = await model_catalog_or_404(valid, plan.requested_model)
    body = dict(plan.responses_body)
    body["model"] = resolved(plan.requested_model, valid)
    dispatch = Dispatch(
        build_dispatch_request(
            request,
            valid,
            route=ROUTE,
            requested_model=plan.requested_model,
            body=body,
            stream=plan.stream,
            catalog=catalog,
        )
    )
    completion_id = f"chatcmpl-{secrets.token_hex(12)}"
    translator = ChatStreamTranslator(
        plan, completion_id, int(clock.now_seconds()), plan.requested_model
    )
    if plan.stream:
        relay = await dispatch.stream()
        ending = StreamEnding()
        return event_stream_response(
            _chunks(relay, translator, ending),
            valid.request_id,
            relay.upstream_headers,
            ending=ending,
        )

    async def complete() -> HttpResponse:
        # The answer is built from the streamed events (text deltas first, spec §1.9).
        committed = await dispatch.complete(keep_frames=True)
        _replay(translator, committed)
        response = JsonResponse(translator.completion(), json_dumps_params={"ensure_ascii": False})
        return with_upstream_headers(response, valid.request_id, committed.upstream_headers)

    return await idempotent(
        request.http,
        route=ROUTE,
        key_id=valid.client.key_id,
        request_id=valid.request_id,
        body=valid.body,
        produce=complete,
    )


async def _chunks(
    relay: StreamRelay, translator: ChatStreamTranslator, ending: StreamEnding | None = None
) -> AsyncIterator[bytes]:
    """The committed stream translated to chat chunks, then the closing chunks and [DONE]:
    the chat chunks of one upstream read as one item; the terminal event's, when nothing more
    is to come, held and handed out with the closing ones as the last item (``ending``)."""
    progress = relay.committed.progress
    stream = relay.committed.stream
    held: list[bytes] = []
    async for _, frames in relay.chunks():
        parts = [
            _frame(chunk)
            for event_type, event in _events(frames)
            for chunk in translator.feed(event_type, event)
        ]
        if held or (progress.terminal_event and stream.ended()):
            held += parts
        elif parts:
            yield b"".join(parts)
    if relay.end.server_shutdown:
        closing = translator.error_chunks(SERVER_SHUTDOWN_MESSAGE)
    elif relay.end.synthetic_failure:
        message = STREAM_CUT_MESSAGE
        if relay.end.stream_error:
            message = f"{message}: {relay.end.stream_error}"
        closing = translator.error_chunks(message)
    else:
        closing = translator.finish()
    held += [_frame(chunk) for chunk in closing]
    held.append(DONE_FRAME)
    if ending is not None:
        ending.last = True
    yield b"".join(held)


def _replay(translator: ChatStreamTranslator, committed: Committed) -> None:
    """Feed ``translator`` every event of the attempt that answered a non-stream request (the
    dispatcher kept them all, its terminal event included)."""
    for event_type, event in _events(committed.buffered_frames):
        translator.feed(event_type, event)
