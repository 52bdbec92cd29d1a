"""The proxy's one outgoing HTTP session builder per library: ``requests`` for the OAuth server
and the appcast, ``aiohttp`` for the ChatGPT upstream (HTTP and WebSocket).

``trust_env`` is off everywhere: system proxy variables are ignored, like the original client
(spec §2.1) — the upstream sees this host's own address and TLS, never a proxy's.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from django.conf import settings

from common.outgoing_http import OutgoingSession, Timeout, outgoing_aiohttp_session

TRUST_ENV = False


def outgoing_session(
    *, timeout: Timeout, pool_connections: int, pool_maxsize: int
) -> OutgoingSession:
    """A pooled ``requests`` session; ``timeout`` applies to the calls that give none."""
    return OutgoingSession(
        timeout=timeout,
        trust_env=TRUST_ENV,
        pool_connections=pool_connections,
        pool_maxsize=pool_maxsize,
    )


def upstream_aiohttp_session(
    *, connector: aiohttp.BaseConnector, **options: Any
) -> aiohttp.ClientSession:
    """An ``aiohttp`` session to the ChatGPT upstream with its connect and read timeouts
    (``CODEX_CONNECT_TIMEOUT_SECONDS``, ``CODEX_READ_TIMEOUT_SECONDS``, no total: a stream
    lasts as long as it keeps sending). Bodies are decompressed here (the client gets plain SSE
    with our own headers), and aiohttp adds no headers of its own: the fingerprint's are the
    only ones."""
    return outgoing_aiohttp_session(
        connect_seconds=settings.CODEX_CONNECT_TIMEOUT_SECONDS,
        read_seconds=settings.CODEX_READ_TIMEOUT_SECONDS,
        trust_env=TRUST_ENV,
        connector=connector,
        auto_decompress=True,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        **options,
    )
