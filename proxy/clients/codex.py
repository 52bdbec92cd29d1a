"""The ChatGPT Codex upstream over HTTP (spec §2.1, §2.3): one pooled aiohttp session per loop."""

from __future__ import annotations

import aiohttp
from django.conf import settings

from proxy.dispatch.failures import ERROR_BODY_READ_CAP
from proxy.loop_resources import upstream_session

TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


def responses_url() -> str:
    return f"{settings.CODEX_UPSTREAM_BASE}/codex/responses"


def compact_url() -> str:
    return f"{settings.CODEX_UPSTREAM_BASE}/codex/responses/compact"


async def post(url: str, *, body: bytes, headers: list[tuple[str, str]]) -> aiohttp.ClientResponse:
    """Send one request; the caller reads (or releases) the returned response.

    Raises one of TRANSPORT_ERRORS when no HTTP answer arrived (connect error, timeout, reset).
    """
    session = await upstream_session.get()
    return await session.post(url, data=body, headers=headers, allow_redirects=False)


async def read_error_body(response: aiohttp.ClientResponse) -> bytes:
    """Up to 1 MiB of an error answer (spec §12), then the connection is released."""
    try:
        chunks = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            chunks += chunk
            if len(chunks) >= ERROR_BODY_READ_CAP:
                break
        return bytes(chunks[:ERROR_BODY_READ_CAP])
    except TRANSPORT_ERRORS:
        return b""
    finally:
        response.release()


def lowercase_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}
