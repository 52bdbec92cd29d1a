"""Every call to the ChatGPT backend (spec §2.1, §2.3): one pooled aiohttp session per loop.

Every upstream URL derives from ``CODEX_UPSTREAM_BASE`` here, so the request path, the usage
check, the model refresh and the admin API agree on the layout. Calls return typed results
(``CodexStream``, ``CodexAnswer``) and raise ``CodexTransportError`` / ``CodexHTTPError``;
nothing outside this package sees an aiohttp object.

Timeouts: the session's connect timeout and the longest silence between two chunks
(``CODEX_CONNECT_TIMEOUT_SECONDS``, ``CODEX_READ_TIMEOUT_SECONDS``) for every call; the JSON
calls (usage, models) add a total of ``JSON_CALL_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from django.conf import settings

from proxy.clients.codex.errors import CodexHTTPError, CodexTransportError
from proxy.loop_resources import upstream_session

TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
ERROR_BODY_READ_CAP = 1024 * 1024
# A 5xx is asked again twice on the same account before it counts (spec §3.6).
SAME_ACCOUNT_5XX_RETRIES = 2
JSON_CALL_TIMEOUT_SECONDS = 30
JSON_BODY_READ_CAP = 16 * 1024 * 1024

Headers = list[tuple[str, str]]


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


def _lowercase_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    chunks = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks += chunk
        if len(chunks) >= cap:
            break
    return bytes(chunks[:cap])


async def _error_body(response: aiohttp.ClientResponse) -> bytes:
    """Up to 1 MiB of an error answer (spec §12), then the connection is released."""
    try:
        return await _read_capped(response, ERROR_BODY_READ_CAP)
    except TRANSPORT_ERRORS:
        return b""
    finally:
        response.release()


class CodexStream:
    """A 200 answer of the responses endpoint whose body is still to be read.

    Read it with ``chunks()``; end it with ``release()`` (read to the end: the connection goes
    back to the pool) or ``close()`` (abandoned half-way: the connection is dropped).
    """

    def __init__(self, response: aiohttp.ClientResponse, set_cookies: tuple[str, ...]) -> None:
        self._response = response
        self.status = response.status
        self.headers = _lowercase_headers(response)
        self.set_cookies = set_cookies

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives. Raises CodexTransportError when it breaks off."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except TRANSPORT_ERRORS as error:
            raise CodexTransportError(type(error).__name__) from None

    def ended(self) -> bool:
        """Whether the whole body has arrived (reading on will not wait)."""
        return self._response.content.at_eof()

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()


@dataclass(frozen=True)
class CodexAnswer:
    """A complete answer: status, lower-cased headers, body, the ``Set-Cookie`` values seen."""

    status: int
    headers: dict[str, str]
    body: bytes
    set_cookies: tuple[str, ...] = ()


async def _post_with_retries(url: str, *, body: bytes, headers: Headers) -> CodexStream:
    session = await upstream_session.get()
    set_cookies: list[str] = []
    for try_number in range(SAME_ACCOUNT_5XX_RETRIES + 1):
        try:
            response = await session.post(url, data=body, headers=headers, allow_redirects=False)
        except TRANSPORT_ERRORS as error:
            raise CodexTransportError(type(error).__name__) from None
        set_cookies += response.headers.getall("Set-Cookie", [])
        if response.status == 200:
            return CodexStream(response, tuple(set_cookies))
        response_headers = _lowercase_headers(response)
        error_body = await _error_body(response)
        if response.status >= 500 and try_number < SAME_ACCOUNT_5XX_RETRIES:
            continue
        raise CodexHTTPError(
            response.status, response_headers, error_body, set_cookies=tuple(set_cookies)
        )
    raise AssertionError("unreachable")


async def open_responses(*, body: bytes, headers: Headers, retry_5xx: bool = True) -> CodexStream:
    """POST ``/codex/responses``; a 5xx is asked again twice first (unless ``retry_5xx`` is
    off). Returns the 200 stream; raises CodexHTTPError for any other final status,
    CodexTransportError when nothing answered."""
    if retry_5xx:
        return await _post_with_retries(responses_url(), body=body, headers=headers)
    session = await upstream_session.get()
    try:
        response = await session.post(
            responses_url(), data=body, headers=headers, allow_redirects=False
        )
    except TRANSPORT_ERRORS as error:
        raise CodexTransportError(type(error).__name__) from None
    set_cookies = tuple(response.headers.getall("Set-Cookie", []))
    if response.status != 200:
        response_headers = _lowercase_headers(response)
        raise CodexHTTPError(
            response.status, response_headers, await _error_body(response), set_cookies=set_cookies
        )
    return CodexStream(response, set_cookies)


async def compact(*, body: bytes, headers: Headers) -> CodexAnswer:
    """POST ``/codex/responses/compact`` (5xx asked again twice) and read the whole answer.
    Raises CodexHTTPError for a non-200 answer, CodexTransportError otherwise."""
    stream = await _post_with_retries(compact_url(), body=body, headers=headers)
    try:
        data = b"".join([chunk async for chunk in stream.chunks()])
    except BaseException:
        # Broken off, or the caller was cancelled (its client left): the connection is
        # dropped, never left to deliver the rest.
        stream.close()
        raise
    stream.release()
    return CodexAnswer(stream.status, stream.headers, data, stream.set_cookies)


async def _get_json_answer(
    url: str, *, headers: Headers, params: dict[str, Any] | None
) -> CodexAnswer:
    session = await upstream_session.get()
    try:
        response = await session.get(
            url,
            headers=headers,
            params=params or None,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(
                total=JSON_CALL_TIMEOUT_SECONDS, connect=settings.CODEX_CONNECT_TIMEOUT_SECONDS
            ),
        )
        try:
            data = await _read_capped(response, JSON_BODY_READ_CAP)
        finally:
            response.release()
    except TRANSPORT_ERRORS as error:
        raise CodexTransportError(type(error).__name__) from None
    return CodexAnswer(
        response.status,
        _lowercase_headers(response),
        data,
        tuple(response.headers.getall("Set-Cookie", [])),
    )


async def usage(*, headers: Headers) -> CodexAnswer:
    """GET the usage endpoint: the first candidate URL that does not answer 404 (spec §4.3).
    Returns its 2xx answer; raises CodexHTTPError (the last status, 404 when none exists),
    CodexTransportError."""
    last: CodexAnswer | None = None
    for url in usage_urls():
        last = await _get_json_answer(url, headers=headers, params=None)
        if last.status == 404:
            continue
        if last.status >= 300:
            break
        return last
    assert last is not None
    raise CodexHTTPError(last.status, last.headers, last.body[:ERROR_BODY_READ_CAP])


async def models(*, headers: Headers, app_version: str) -> AsyncIterator[CodexAnswer]:
    """The answers of the model list endpoints, in the order to try them; the caller stops
    reading once one holds models. A URL that cannot be reached is skipped (logged by the
    caller through ``failures``)."""
    for url, params in models_urls(app_version):
        try:
            yield await _get_json_answer(url, headers=headers, params=params)
        except CodexTransportError as error:
            yield CodexAnswer(0, {}, error.detail.encode())
