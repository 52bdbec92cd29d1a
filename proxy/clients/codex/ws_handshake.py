"""The upstream WebSocket's opening handshake as an HTTP answer (spec §2.6, §2.7, §3.6).

aiohttp's ``ws_connect`` drops the body of an upgrade the server refused (a status other than
101) and keeps only its status and headers. The body is what says why: a Cloudflare challenge
page, ``{"error": {"code": "account_deactivated"}}``, a 400 to pass to the client. So the
openings go through a session of their own whose middleware reads a refused upgrade's answer
(at most ``ERROR_BODY_READ_CAP`` bytes, as for an HTTP error) and raises ``UpgradeRefused``
with all of it; ``websocket.py`` turns that into the ``CodexHTTPError`` the HTTP call would
have raised, so the dispatch reads both transports alike.

The session is otherwise the HTTP calls' (``proxy.loop_resources``): one per loop, no system
proxy, bodies decompressed, closed with the loop's other resources.
"""

from __future__ import annotations

import aiohttp

# ws_pool first: its loop closer (the pooled sockets, closed with a close frame) must run
# before this module's (the session under them, which would cut them).
from proxy.clients.codex import ws_pool  # noqa: F401
from proxy.clients.codex.transport import ERROR_BODY_READ_CAP, TRANSPORT_ERRORS
from proxy.clients.outgoing import upstream_aiohttp_session
from proxy.loop_resources import PerLoop, on_loop_close


class UpgradeRefused(Exception):
    """The upstream answered the upgrade with ``status`` (not 101): its lower-cased headers,
    its body (capped) and its ``Set-Cookie`` values."""

    def __init__(
        self, status: int, headers: dict[str, str], body: bytes, set_cookies: tuple[str, ...]
    ) -> None:
        super().__init__(f"websocket upgrade refused ({status})")
        self.status = status
        self.headers = headers
        self.body = body
        self.set_cookies = set_cookies


async def _refused_body(response: aiohttp.ClientResponse) -> bytes:
    chunks = bytearray()
    try:
        async for chunk in response.content.iter_chunked(64 * 1024):
            chunks += chunk
            if len(chunks) >= ERROR_BODY_READ_CAP:
                break
    except TRANSPORT_ERRORS:
        pass  # what arrived is kept; a body cut short still names its status
    finally:
        response.release()
    return bytes(chunks[:ERROR_BODY_READ_CAP])


async def keep_refused_upgrade_body(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """Client middleware: a 101 goes on to aiohttp's handshake checks; any other answer is
    read and raised as ``UpgradeRefused`` (redirects included: the HTTP calls do not follow
    them either)."""
    response = await handler(request)
    if response.status == 101:
        return response
    headers = {name.lower(): value for name, value in response.headers.items()}
    set_cookies = tuple(response.headers.getall("Set-Cookie", []))
    raise UpgradeRefused(response.status, headers, await _refused_body(response), set_cookies)


async def _open_websocket_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    return upstream_aiohttp_session(connector=connector, middlewares=(keep_refused_upgrade_body,))


websocket_session: PerLoop[aiohttp.ClientSession] = PerLoop(_open_websocket_session)


async def _close_this_loops_session() -> None:
    session = websocket_session.pop()
    if session is not None:
        await session.close()


on_loop_close(_close_this_loops_session)
