"""Client address and scheme as seen through the reverse proxies listed in TRUSTED_PROXIES.

``CF-Connecting-IP`` is Cloudflare's header: believed only when TRUST_CF_CONNECTING_IP is on
(the trusted proxy is Cloudflare, or sits behind it and passes the header on), because any
client can send it through a proxy that does not strip it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, MutableMapping

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.utils.decorators import sync_and_async_middleware

# Headers a reverse proxy sets. Believed only from a trusted proxy; from anyone else they are
# removed before any view (or Django's SECURE_PROXY_SSL_HEADER / USE_X_FORWARDED_HOST) sees them.
FORWARDING_HEADERS = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_CF_CONNECTING_IP",
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _parse_ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _is_trusted(address, networks: Iterable[Network]) -> bool:
    return address is not None and any(address in network for network in networks)


def resolve_forwarded_request(
    meta: MutableMapping[str, str],
    networks: tuple[Network, ...],
    *,
    trust_cf_connecting_ip: bool | None = None,
) -> None:
    """Rewrite ``meta`` in place so REMOTE_ADDR is the real client.

    From a trusted peer: CF-Connecting-IP wins when present and valid and
    ``trust_cf_connecting_ip`` (default: the TRUST_CF_CONNECTING_IP setting) is on; otherwise
    the right-most X-Forwarded-For entry that is not itself a trusted proxy. X-Forwarded-Proto
    and -Host are kept for Django to use. From any other peer all forwarding headers are
    dropped, and CF-Connecting-IP is dropped whenever it is not believed.
    """
    if trust_cf_connecting_ip is None:
        trust_cf_connecting_ip = settings.TRUST_CF_CONNECTING_IP
    peer = _parse_ip(meta.get("REMOTE_ADDR"))
    if not _is_trusted(peer, networks):
        for header in FORWARDING_HEADERS:
            meta.pop(header, None)
        return
    if not trust_cf_connecting_ip:
        meta.pop("HTTP_CF_CONNECTING_IP", None)
    client = _parse_ip(meta.get("HTTP_CF_CONNECTING_IP"))
    if client is None:
        hops = [_parse_ip(hop) for hop in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        hops = [hop for hop in hops if hop is not None]
        for hop in reversed(hops):
            client = hop
            if not _is_trusted(hop, networks):
                break
    if client is not None:
        meta["REMOTE_ADDR"] = str(client)


def resolve_through_trusted_proxies(meta: MutableMapping[str, str]) -> None:
    """``resolve_forwarded_request`` through the TRUSTED_PROXIES of the moment (read per call,
    so a changed setting applies at once); the /v1 handler is handed this (config/asgi.py)."""
    resolve_forwarded_request(meta, tuple(settings.TRUSTED_PROXIES))


@sync_and_async_middleware
def TrustedProxyMiddleware(get_response):  # noqa: N802 - Django middleware naming
    if iscoroutinefunction(get_response):

        async def async_middleware(request):
            resolve_through_trusted_proxies(request.META)
            return await get_response(request)

        return async_middleware

    def middleware(request):
        resolve_through_trusted_proxies(request.META)
        return get_response(request)

    return middleware


@sync_and_async_middleware
def SecureCookiesOverTLSMiddleware(get_response):  # noqa: N802 - Django middleware naming
    """Mark the session and CSRF cookies ``Secure`` on every answer to a request that came
    over TLS (directly, or through a trusted proxy's X-Forwarded-Proto), whatever
    SESSION_COOKIE_SECURE says: a deployment behind its own TLS proxy gets the admin API's
    behaviour for the Django admin's cookies too, and plain-http ``make run`` keeps working."""
    names = (settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME)

    def secure(request, response):
        if request.is_secure():
            for name in names:
                if name in response.cookies:
                    response.cookies[name]["secure"] = True
        return response

    if iscoroutinefunction(get_response):

        async def async_middleware(request):
            return secure(request, await get_response(request))

        return async_middleware

    def middleware(request):
        return secure(request, get_response(request))

    return middleware
