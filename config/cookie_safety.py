"""Cookie values unquoted in linear time on every route.

Django parses the ``Cookie`` header with ``http.cookies._unquote``. On CPython before 3.11.10
(3.12.6, 3.13.0) that function is quadratic in a quoted value full of backslashes
(CVE-2024-7592): an 80 KB ``Cookie: a="\\1\\1…"`` cost 11.8 s of CPU on this machine's 3.11.7,
on any route — the admin, the admin API, the webhook, ``/v1``. ``install()`` replaces it, once
per process before a request is served (``config.apps``), with ``linear_unquote``: the same
result in one regular-expression pass. The web process's header caps (config/http_protocol.py)
bound the header's size besides.
"""

from __future__ import annotations

import http.cookies
import re

# A backslash and what it escapes: three octal digits (\012 is a newline), else any one
# character but a newline — as CPython's own parser reads them, octal first.
# CPython's own, kept for the tests that compare the two.
cpython_unquote = http.cookies._unquote

_ESCAPE = re.compile(r"\\(?:([0-3][0-7][0-7])|(.))")


def _unescaped(match: re.Match[str]) -> str:
    octal, character = match.groups()
    return chr(int(octal, 8)) if octal is not None else character


def linear_unquote(value: str | None) -> str | None:
    """``http.cookies._unquote(value)``: a value in double quotes loses them and its escapes
    are decoded; any other value is returned as it is."""
    if value is None or len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    return _ESCAPE.sub(_unescaped, value[1:-1])


def install() -> None:
    """Make Django's cookie parsing (and ``http.cookies.SimpleCookie``) use ``linear_unquote``."""
    # typeshed spells _unquote as two overloads (str to str, None to None): the same contract.
    http.cookies._unquote = linear_unquote  # type: ignore[assignment]
