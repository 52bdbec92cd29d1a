"""A committed stream relayed to the client (spec §1.4, §1.7): the upstream's bytes verbatim,
the slot (and the key's in-flight entry) kept alive while it runs and released when it ends,
and — when the upstream ended without a terminal event — a synthetic failure event.

After the first byte there is no rotation; how the stream ended goes to ``on_end`` (the
dispatch's report) exactly once, in a ``finally``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from proxy.clients import codex
from proxy.dispatch.progress import observe
from proxy.domain.dispatch_types import Committed, DispatchRequest, StreamEnd
from proxy.domain.sse import (
    DONE_FRAME,
    SERVER_SHUTDOWN,
    SUCCESS_TERMINAL_EVENTS,
    Frame,
    SSEFrameTooLarge,
    frames_of,
    server_shutdown_event,
    stream_disconnected_event,
)
from proxy.scheduling import scheduler
from proxy.scheduling.keep_alive import KeepAlive


class StreamRelay:
    """Iterate ``chunks()`` (bytes with the frames each finished) or ``relay()`` (bytes, the
    ``/v1/responses`` way) once."""

    def __init__(
        self,
        request: DispatchRequest,
        committed: Committed,
        on_end: Callable[[StreamEnd], None],
    ) -> None:
        self.request = request
        self.committed = committed
        self._on_end = on_end
        self.end = StreamEnd()

    @property
    def upstream_headers(self) -> dict[str, str]:
        return self.committed.upstream_headers

    async def chunks(self) -> AsyncIterator[tuple[bytes, list[Frame]]]:
        """The committed stream's chunks with the complete frames each one finished.

        Cancellation (the client left) closes the upstream connection at once. The slot is
        released when the stream ends; while it runs, it and the key's in-flight entry are
        kept alive (even through a long pause of the upstream) so long responses keep
        counting.
        """
        committed = self.committed
        progress = committed.progress
        scanner = committed.scanner
        keep_alive = KeepAlive(self.request, committed.slot).start()
        client_cancelled = False
        server_shutdown = False
        stream_error: str | None = None
        try:
            if committed.buffered:
                held = b"".join(committed.buffered)
                committed.buffered = []
                yield held, committed.buffered_frames
            async for chunk in committed.stream.chunks():
                frames = frames_of(committed.stream, chunk, scanner)
                observe(frames, progress, self.request)
                yield chunk, frames
        except codex.CodexTransportError as error:
            stream_error = f"upstream read failed ({error.detail})"
        except SSEFrameTooLarge as error:
            stream_error = str(error)
        except asyncio.CancelledError as cancelled:
            if cancelled.args != (SERVER_SHUTDOWN,):
                client_cancelled = True
                raise
            # The graceful stop ran out of time: the stream ends here, with a failure event
            # the caller sends (the cancellation was meant for this stream alone).
            server_shutdown = True
        except GeneratorExit:
            client_cancelled = True
            raise
        finally:
            keep_alive.stop()
            if client_cancelled or server_shutdown or stream_error or not progress.terminal_event:
                committed.stream.close()
            else:
                committed.stream.release()
            succeeded = progress.terminal_event in SUCCESS_TERMINAL_EVENTS and not stream_error
            self.end = StreamEnd(
                client_cancelled=client_cancelled,
                synthetic_failure=not (client_cancelled or server_shutdown)
                and not progress.terminal_event,
                stream_error=stream_error,
                server_shutdown=server_shutdown,
            )
            try:
                scheduler.release_later(committed.slot, succeeded=succeeded)
            finally:
                self._on_end(self.end)

    async def relay(self, ending: StreamEnding | None = None) -> AsyncIterator[bytes]:
        """The bytes of the committed stream verbatim, then the synthetic failure if the
        upstream ended without a terminal event, then ``data: [DONE]``.

        A chunk that carries the terminal event of a stream with nothing more to read is held
        and handed out with what follows it as ONE last item (``ending.last`` set), so that the
        server can end the answer in the same write."""
        progress = self.committed.progress
        stream = self.committed.stream
        held = b""
        async for chunk, _ in self.chunks():
            if held or (progress.terminal_event and stream.ended()):
                held += chunk
                continue
            yield chunk
        tail = [held]
        if self.end.server_shutdown:
            separator = b"" if self.committed.scanner.ends_with_blank_line else b"\n\n"
            tail.append(separator + server_shutdown_event(progress.response_id))
        elif self.end.synthetic_failure:
            separator = b"" if self.committed.scanner.ends_with_blank_line else b"\n\n"
            tail.append(
                separator + stream_disconnected_event(progress.response_id, self.end.stream_error)
            )
        if not progress.done_seen:
            tail.append(DONE_FRAME)
        if ending is not None:
            ending.last = True
        yield b"".join(tail)


class StreamEnding:
    """Shared between an SSE answer's generator and the server that sends it: ``last`` is set
    just before the generator hands out its last item (the server ends the body with it)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = False
