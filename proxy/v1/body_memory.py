"""The memory a process gives to ``/v1`` request bodies at once (issue 35 item 4).

Each body is capped at ``V1_MAX_BODY_BYTES`` (16 MiB), but many at once are not: 40 parallel
15 MiB bodies took a worker 600 MB up before a single one was answered. So every body — an
HTTP request's from its first byte read (its declared ``Content-Length`` at once; a chunked
body as it arrives), a client WebSocket frame's from its arrival — holds its size against one
budget per process, ``V1_BODY_BYTES_PER_PROCESS`` (256 MiB by default), until its answer has
ended: the raw body stays referenced that long (the parsed body with it). A body that does not
fit is refused at once — 503 ``server_busy`` with ``Retry-After: 1`` in the OpenAI envelope (an
error frame on the WebSocket) — instead of waiting: a client waiting with its body unsent holds
a connection and a key slot for nothing, and SDKs retry a 503 by themselves.

The count is per process (a lock, not a loop resource: one budget whatever thread or loop
reads a body) and is only arithmetic: it costs the request path no I/O.
"""

from __future__ import annotations

import threading

from django.conf import settings

from proxy.domain.client_errors import ClientError

SERVER_BUSY = ClientError(
    503,
    "server_error",
    "server_busy",
    "The proxy is holding as many request bodies as it may; retry the request shortly",
)
SERVER_BUSY_RETRY_AFTER_SECONDS = 1


class BodyMemory:
    """The bytes of bodies held in this process, against ``V1_BODY_BYTES_PER_PROCESS``."""

    def __init__(self) -> None:
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes when they fit under the limit; False (nothing held) when
        they do not."""
        with self._lock:
            if self._held + size > settings.V1_BODY_BYTES_PER_PROCESS:
                return False
            self._held += size
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self._held = max(0, self._held - size)


body_memory = BodyMemory()


class BodyHold:
    """What one body holds of the process's ``BodyMemory``; it grows as the body arrives and
    is given back once, by ``release``."""

    def __init__(self, memory: BodyMemory = body_memory) -> None:
        self._memory = memory
        self.size = 0

    def grow_to(self, size: int) -> bool:
        """Hold ``size`` bytes in all; False when the rest does not fit (what was held stays
        held until ``release``)."""
        if size <= self.size:
            return True
        if not self._memory.take(size - self.size):
            return False
        self.size = size
        return True

    def release(self) -> None:
        self._memory.give_back(self.size)
        self.size = 0
