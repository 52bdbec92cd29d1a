"""The ChatGPT Codex upstream over HTTP (spec §2.1, §2.3): one pooled aiohttp session per loop.

Every upstream URL derives from ``CODEX_UPSTREAM_BASE`` here, so the request path, the usage
check and the model refresh agree on the layout.
"""

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


def usage_urls() -> list[str]:
    """Where the usage endpoint may be, in the order to try them (404 → the next one)."""
    base = settings.CODEX_UPSTREAM_BASE
    if "/backend-api" in base:
        return [f"{base}/wham/usage", f"{base}/codex/usage"]
    return [f"{base}/api/codex/usage", f"{base}/codex/usage"]


def models_urls(app_version: str) -> list[tuple[str, dict[str, str]]]:
    """Where the model list may be, with the query of each, in the order to try them."""
    base = settings.CODEX_UPSTREAM_BASE
    return [
        (f"{base}/codex/models", {"client_version": app_version}),
        (f"{base}/models", {}),
        (f"{base}/sentinel/chat-requirements", {}),
    ]


async def post(url: str, *, body: bytes, headers: list[tuple[str, str]]) -> aiohttp.ClientResponse:
    """Send one request; the caller reads (or releases) the returned response.

    Raises one of TRANSPORT_ERRORS when no HTTP answer arrived (connect error, timeout, reset).
    """
    session = await upstream_session.get()
    return await session.post(url, data=body, headers=headers, allow_redirects=False)


async def get(url: str, *, headers: list[tuple[str, str]]) -> aiohttp.ClientResponse:
    """GET ``url``; the caller reads (or releases) the returned response.

    Raises one of TRANSPORT_ERRORS when no HTTP answer arrived.
    """
    session = await upstream_session.get()
    return await session.get(url, headers=headers, allow_redirects=False)


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
