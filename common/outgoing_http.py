"""How the project builds its outgoing HTTP sessions (zulip's ``OutgoingSession``): a default
timeout on every call, no automatic retries, a bounded connection pool, and ``trust_env`` (the
host's ``HTTP(S)_PROXY``/``NO_PROXY`` variables and ``.netrc``) decided by the caller, never
left to the library's default.

Each app chooses its values once, in its own ``clients/outgoing.py``; the calls themselves stay
in the apps' ``clients/`` modules.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import requests
from requests.adapters import HTTPAdapter

# (connect, read) seconds, or one number for both, as requests takes it.
Timeout = float | tuple[float, float]


class _TimeoutAdapter(HTTPAdapter):
    """An adapter that gives a call without its own timeout the session's."""

    def __init__(self, *, timeout: Timeout, **options: Any) -> None:
        self.timeout = timeout
        super().__init__(**options)

    # The stubs spell out send()'s keywords; this one passes them all on as they came.
    def send(self, request, **kwargs):  # type: ignore[override]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, **kwargs)


class OutgoingSession(requests.Session):
    """A ``requests`` session: ``timeout`` for calls that give none, ``trust_env`` as given, and
    no automatic retries — urllib3 would log the URL (a Bot API URL holds the token) and repeat
    calls that must not be repeated (a single-use refresh token); retrying is the client's
    decision."""

    def __init__(
        self, *, timeout: Timeout, trust_env: bool, pool_connections: int, pool_maxsize: int
    ) -> None:
        super().__init__()
        self.trust_env = trust_env
        adapter = _TimeoutAdapter(
            timeout=timeout,
            pool_connections=pool_connections,
            pool_maxsize=pool_maxsize,
            max_retries=0,
        )
        self.mount("https://", adapter)
        self.mount("http://", adapter)


def outgoing_aiohttp_session(
    *,
    connect_seconds: float,
    read_seconds: float,
    trust_env: bool,
    connector: aiohttp.BaseConnector,
    **options: Any,
) -> aiohttp.ClientSession:
    """An ``aiohttp`` session: ``connect_seconds`` to connect, ``read_seconds`` between two
    reads and no total (a stream lasts as long as it keeps sending), ``trust_env`` as given.
    ``options`` are the rest of ``aiohttp.ClientSession``'s arguments."""
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_seconds, sock_read=read_seconds)
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, trust_env=trust_env, **options
    )
