"""One attempt on one account, as a per-call strategy (spec §1.4, §1.5, §3.6).

Each strategy says which backend call it makes and how its answer is read:

* ``StreamStrategy`` — stream clients: the SSE is held until real output, a terminal event or
  64 KiB (``COMMIT_PREFETCH_LIMIT``), so a failure right after ``response.created`` can still
  move to another account;
* ``CompleteStrategy`` — non-stream clients: the SSE is read to its end (nothing was sent, so
  any failure rotates);
* ``CompactStrategy`` — ``/v1/responses/compact``: one JSON call, no request pacing.

``run`` returns the attempt's success or an ``AttemptFailure``; it never raises for what the
upstream did.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from common import clock
from proxy.clients import codex
from proxy.dispatch.progress import is_empty_completion, observe
from proxy.dispatch.transport_choice import encode_body, falls_back_to_http, open_stream
from proxy.domain.dispatch_types import (
    Committed,
    CompactResult,
    DispatchRequest,
    RequestTiming,
    StreamProgress,
)
from proxy.domain.failures import (
    AttemptFailure,
    FailureKind,
    classify_failed_event,
    failure_from_error,
)
from proxy.domain.slots import Slot
from proxy.domain.sse import (
    SUCCESS_TERMINAL_EVENTS,
    Frame,
    SSEFrameTooLarge,
    SSEScanner,
    frames_of,
)
from proxy.domain.upstream_request import compact_body, scoped_body

COMMIT_PREFETCH_LIMIT = 64 * 1024


async def upstream_timed(
    chunks: AsyncIterator[bytes], timing: RequestTiming
) -> AsyncIterator[bytes]:
    """``chunks``, the time spent waiting for each added to ``timing.upstream_wait``."""
    iterator = aiter(chunks)
    while True:
        waiting = clock.monotonic()
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        finally:
            timing.upstream_wait += clock.monotonic() - waiting
        yield chunk


_encoded = encode_body


class Strategy(Protocol):
    call: codex.Call
    #: The ledger's ``transport`` of the call.
    transport: str
    #: Whether the request interval applies (compact skips it, spec §1.5).
    paced: bool

    def body(self, request: DispatchRequest, account_id: str) -> bytes: ...

    async def run(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
    ) -> Committed | CompactResult | AttemptFailure: ...


def _broken_read(error: codex.CodexTransportError | SSEFrameTooLarge) -> AttemptFailure:
    """The failure of an upstream stream that broke off, or sent a frame over the cap, before
    the attempt was done with it (the stream is closed by the caller)."""
    if isinstance(error, SSEFrameTooLarge):
        return AttemptFailure(FailureKind.INVALID_SSE, detail=str(error), in_stream=True)
    return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=error.detail, in_stream=True)


def _of_stream(
    failure: AttemptFailure, stream: codex.CodexStream | codex.CodexWebSocketStream
) -> AttemptFailure:
    """``failure``, seen in the 200 stream ``stream``, with what that answer said: its headers
    (the rate limits a failed stream still reports, the trace ids) and the WebSocket pool's
    decision, for the ledger."""
    failure.in_stream = True
    failure.headers = stream.headers
    failure.websocket_pool = getattr(stream, "pool_decision", None)
    return failure


def _failed_before_output(progress: StreamProgress) -> bool:
    """The stream ended with a failure event before any real output: nothing was sent, so it
    is the request's error answer (spec §1.7), not a stream to relay."""
    return (
        progress.terminal_event is not None
        and progress.terminal_event not in SUCCESS_TERMINAL_EVENTS
        and not progress.output_seen
    )


class _SSEStrategy:
    call = codex.Call.RESPONSES
    transport = "http_sse"  # set per attempt: "websocket" or "http_sse" (transport_choice)
    paced = True

    def body(self, request: DispatchRequest, account_id: str) -> bytes:
        return _encoded(self.fields(request, account_id))

    def fields(self, request: DispatchRequest, account_id: str) -> dict[str, Any]:
        return scoped_body(request.body, request.client_identity, account_id, request.request_id)

    async def run(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
    ) -> Committed | CompactResult | AttemptFailure:
        outcome = await self._run_once(request, slot, attempt_index, headers, cookies_seen)
        if isinstance(outcome, AttemptFailure) and falls_back_to_http(
            request, outcome, self.transport
        ):
            # The WebSocket broke before any output: once more over HTTP SSE, same account.
            outcome = await self._run_once(
                request, slot, attempt_index, headers, cookies_seen, http_only=True
            )
        return outcome

    async def _run_once(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
        *,
        http_only: bool = False,
    ) -> Committed | CompactResult | AttemptFailure:
        raise NotImplementedError

    async def _open(
        self,
        request: DispatchRequest,
        slot: Slot,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
        *,
        http_only: bool = False,
    ) -> codex.CodexStream | codex.CodexWebSocketStream | AttemptFailure:
        tried: list[str] = []
        opening = clock.monotonic()
        try:
            stream = await open_stream(
                request,
                account_id=slot.account.id,
                fields=self.fields(request, slot.account.id),
                headers=headers,
                transports_tried=tried,
                http_only=http_only,
            )
        except codex.CodexError as error:
            cookies_seen += getattr(error, "set_cookies", ())
            return failure_from_error(error)
        finally:
            request.timing.upstream_wait += clock.monotonic() - opening
            # The ledger's transport is the last one this request used.
            if tried:
                self.transport = tried[-1]
        cookies_seen += stream.set_cookies
        return stream


class StreamStrategy(_SSEStrategy):
    async def _run_once(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
        *,
        http_only: bool = False,
    ) -> Committed | CompactResult | AttemptFailure:
        stream = await self._open(request, slot, headers, cookies_seen, http_only=http_only)
        if isinstance(stream, AttemptFailure):
            return stream
        scanner = SSEScanner()
        progress = StreamProgress()
        buffered: list[bytes] = []
        buffered_frames: list[Frame] = []
        held = 0
        try:
            async for chunk in upstream_timed(stream.chunks(), request.timing):
                buffered.append(chunk)
                held += len(chunk)
                frames = frames_of(stream, chunk, scanner)
                buffered_frames += frames
                failure = observe(frames, progress, request)
                if failure is not None:
                    stream.close()
                    return _of_stream(failure, stream)
                if progress.output_seen or progress.terminal_event or held >= COMMIT_PREFETCH_LIMIT:
                    break
            else:
                if not progress.terminal_event:
                    stream.release()
                    return _of_stream(
                        AttemptFailure(
                            FailureKind.UPSTREAM_UNAVAILABLE,
                            detail="upstream stream ended before any output",
                            response_id=progress.response_id,
                        ),
                        stream,
                    )
        except (codex.CodexTransportError, SSEFrameTooLarge) as error:
            stream.close()
            return _of_stream(_broken_read(error), stream)
        except BaseException:
            # The client left while the stream was held (after response.created, before any
            # output): the upstream stops with it, not when its whole answer has arrived.
            stream.close()
            raise
        if _failed_before_output(progress):
            # A failure the rotation does not move on from (e.g. ``invalid_prompt``): the
            # client gets the original's error answer, not the upstream's event.
            stream.close()
            return _of_stream(classify_failed_event(progress.terminal or {}), stream)
        return Committed(
            slot=slot,
            attempt_index=attempt_index,
            stream=stream,
            upstream_headers=stream.headers,
            buffered=buffered,
            scanner=scanner,
            progress=progress,
            buffered_frames=buffered_frames,
        )


class CompleteStrategy(_SSEStrategy):
    """``keep_frames``: keep every event too, for callers that build their answer from the
    stream rather than from the terminal ``response`` object."""

    def __init__(self, *, keep_frames: bool = False) -> None:
        self.keep_frames = keep_frames

    async def _run_once(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
        *,
        http_only: bool = False,
    ) -> Committed | CompactResult | AttemptFailure:
        stream = await self._open(request, slot, headers, cookies_seen, http_only=http_only)
        if isinstance(stream, AttemptFailure):
            return stream
        scanner = SSEScanner()
        progress = StreamProgress()
        kept: list[Frame] = []
        try:
            async for chunk in upstream_timed(stream.chunks(), request.timing):
                frames = frames_of(stream, chunk, scanner)
                if self.keep_frames:
                    kept += frames
                observe(frames, progress, request)
        except (codex.CodexTransportError, SSEFrameTooLarge) as error:
            stream.close()
            return _of_stream(_broken_read(error), stream)
        except BaseException:
            # The client left during the read (a non-stream answer is read whole before a
            # byte is sent): the upstream stream is closed at once, not read to its end.
            stream.close()
            raise
        stream.release()
        terminal = progress.terminal
        if progress.terminal_event is None or terminal is None:
            return _of_stream(
                AttemptFailure(
                    FailureKind.UPSTREAM_UNAVAILABLE,
                    detail="upstream stream ended before response.completed",
                    response_id=progress.response_id,
                ),
                stream,
            )
        if progress.terminal_event not in SUCCESS_TERMINAL_EVENTS:
            return _of_stream(classify_failed_event(terminal), stream)
        response_object = terminal.get("response")
        if not isinstance(response_object, dict):
            return _of_stream(
                AttemptFailure(FailureKind.INVALID_SSE, detail="terminal event without response"),
                stream,
            )
        if is_empty_completion(response_object):
            return _of_stream(
                AttemptFailure(
                    FailureKind.EMPTY_RESPONSE,
                    detail="upstream completed with no output",
                    response_id=response_object.get("id"),
                ),
                stream,
            )
        return Committed(
            slot=slot,
            attempt_index=attempt_index,
            stream=stream,
            upstream_headers=stream.headers,
            buffered=[],
            scanner=scanner,
            progress=progress,
            buffered_frames=kept,
            response_object=response_object,
        )


class CompactStrategy:
    call = codex.Call.COMPACT
    transport = "http"
    paced = False

    def body(self, request: DispatchRequest, account_id: str) -> bytes:
        return _encoded(
            compact_body(request.body, request.client_identity, account_id, request.request_id)
        )

    async def run(
        self,
        request: DispatchRequest,
        slot: Slot,
        attempt_index: int,
        headers: list[tuple[str, str]],
        cookies_seen: list[str],
    ) -> Committed | CompactResult | AttemptFailure:
        try:
            calling = clock.monotonic()
            try:
                answer = await codex.compact(
                    body=self.body(request, slot.account.id), headers=headers
                )
            finally:
                request.timing.upstream_wait += clock.monotonic() - calling
        except codex.CodexError as error:
            cookies_seen += getattr(error, "set_cookies", ())
            return failure_from_error(error)
        cookies_seen += answer.set_cookies
        try:
            payload = json.loads(answer.body)
        except ValueError:
            # A non-JSON answer is an upstream error, returned as 502 (spec §1.5).
            return AttemptFailure(
                FailureKind.CLIENT_ERROR, upstream_status=502, body=answer.body[:200]
            )
        return CompactResult(slot, attempt_index, answer.headers, answer.body, payload)
