"""Upstream cookies (spec §2.6): ``cf_clearance`` captured from any answer and replayed (stored
by ``proxy.services.account_cookies``).

Cookies follow RFC 6265 identity (account, domain, name, path). A cookie without a Domain
attribute belongs to the upstream host. Replay sends every live cookie whose domain and path
match the request, longest path first.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime, timedelta
from http.cookies import CookieError, Morsel, SimpleCookie
from typing import Any
from urllib.parse import urlsplit

CAPTURED_COOKIE_NAMES = frozenset({"cf_clearance"})


def _expiry(morsel: Morsel[str], now: datetime) -> datetime | None:
    max_age = morsel["max-age"]
    if max_age:
        try:
            seconds = int(max_age)
        except ValueError:
            seconds = None
        if seconds is not None:
            return now if seconds <= 0 else now + timedelta(seconds=seconds)
    expires = morsel["expires"]
    if expires:
        try:
            return email.utils.parsedate_to_datetime(expires).astimezone(UTC)
        except (TypeError, ValueError):
            pass
        try:
            parsed = datetime.fromisoformat(expires)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            return None  # unparseable: kept as a session cookie (seed §4.10)
    return None


def captured_cookies(
    set_cookie_headers: list[str], *, url: str, now: datetime
) -> list[dict[str, Any]]:
    """The cookies worth keeping among an answer's Set-Cookie headers."""
    host = urlsplit(url).hostname or ""
    found = []
    for header in set_cookie_headers:
        cookie = SimpleCookie()
        try:
            cookie.load(header)
        except CookieError:
            continue
        for name, morsel in cookie.items():
            if name not in CAPTURED_COOKIE_NAMES:
                continue
            found.append(
                {
                    "domain": (morsel["domain"] or host).lstrip(".").lower(),
                    "name": name,
                    "value": morsel.value,
                    "path": morsel["path"] or "/",
                    "expires_at": _expiry(morsel, now),
                }
            )
    return found


def cookie_header(cookies: list[dict[str, Any]], *, url: str, now: datetime) -> str | None:
    """``Cookie:`` value for ``url`` from an account's stored cookies, or None."""
    if not cookies:
        return None
    parts = urlsplit(url)
    host, path = (parts.hostname or "").lower(), parts.path or "/"
    matching = []
    for cookie in cookies:
        domain = cookie["domain"].lower()
        if not (host == domain or host.endswith("." + domain)):
            continue
        cookie_path = cookie["path"] or "/"
        if not (path == cookie_path or path.startswith(cookie_path.rstrip("/") + "/")):
            continue
        expires = cookie.get("expires_at")
        if expires is not None:
            expires = datetime.fromisoformat(expires) if isinstance(expires, str) else expires
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=UTC)
            if expires <= now:
                continue
        matching.append(cookie)
    if not matching:
        return None
    matching.sort(key=lambda cookie: len(cookie["path"] or "/"), reverse=True)
    return "; ".join(f"{cookie['name']}={cookie['value']}" for cookie in matching)
