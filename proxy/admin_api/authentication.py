"""Who may call the admin API (spec §6.1): the admin of the shared session store, or whoever
holds the admin API key.

* ``x-api-key`` — if present it is the only credential checked: SHA-256, constant-time
  comparison with ``runtime_settings.admin_api_key_hash``; a wrong one is 401 / 40103.
* the ``cpr_admin_session`` cookie — the session store the Django admin uses too
  (``proxy.sessions``): one identity for both surfaces.

A cookie-authenticated write must come from the API's own origin (or one of
CSRF_TRUSTED_ORIGINS): the original console sends no CSRF token but always its ``Origin``, and
SameSite=Lax alone leaves same-site subdomains able to post. A cookie-authenticated request of
any method that the browser marks ``Sec-Fetch-Site: cross-site`` is refused too: SameSite=Lax still
sends the cookie on a top-level navigation, and some GET routes act (``accounts/test``,
``accounts/quota``, ``accounts/models`` call the upstream), so a link on another site must not
start them. Key-authenticated calls carry no ambient credential and need no such check.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions

from proxy.admin_api.envelope import ApiError, BodyCode
from proxy.services.admin_api_key import admin_api_key_matches
from proxy.sessions import admin_session_user

API_KEY_HEADER = "HTTP_X_API_KEY"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class AdminApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        key = request.META.get(API_KEY_HEADER)
        if key is None:
            return None
        if not admin_api_key_matches(key):
            raise ApiError(BodyCode.INVALID_API_KEY, "Invalid admin API key")
        return ("admin-api-key", "api-key")

    def authenticate_header(self, request) -> str:
        return "x-api-key"


def _same_origin(request) -> bool:
    origin = request.META.get("HTTP_ORIGIN")
    if origin is None:
        # No Origin: not a browser's cross-site form post (those carry it); a fetch() from a
        # page always sends it for writes. Sec-Fetch-Site settles what is left.
        return request.META.get("HTTP_SEC_FETCH_SITE", "same-origin") in (
            "same-origin",
            "none",
        )
    try:
        own = f"{request.scheme}://{request.get_host()}"
    except Exception:  # DisallowedHost: no origin can match
        return False
    return origin == own or origin in settings.CSRF_TRUSTED_ORIGINS


class AdminSessionAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        if not token:
            return None
        user = admin_session_user(token, now=timezone.now())
        if user is None:
            return None
        refusal = cross_origin_refusal(request)
        if refusal is not None:
            raise refusal
        return (user, "session")


def cross_origin_refusal(request) -> ApiError | None:
    """The 403 / 40301 of a cookie-authenticated request from another origin (a write whose
    Origin is not the API's own or a trusted one, or any request the browser marks
    ``Sec-Fetch-Site: cross-site``), None when it may go on."""
    if request.method not in SAFE_METHODS and not _same_origin(request):
        return ApiError(BodyCode.CROSS_ORIGIN, "Cross-origin write refused (Origin does not match)")
    if request.META.get("HTTP_SEC_FETCH_SITE") == "cross-site":
        return ApiError(
            BodyCode.CROSS_ORIGIN, "Cross-site request refused (Sec-Fetch-Site: cross-site)"
        )
    return None


class IsAdmin(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        if request.user is None:
            raise exceptions.NotAuthenticated()
        return True


def admin_credentials_refusal(*, api_key: str | None, session_token: str | None) -> ApiError | None:
    """The 401 the admin API would answer for these credentials, or None when they are an
    admin's: the same two checks as the authentication classes above, for a caller that has
    only the request's headers (the ASGI layer, before it reads a large body)."""
    try:
        if api_key is not None:
            if admin_api_key_matches(api_key):
                return None
            return ApiError(BodyCode.INVALID_API_KEY, "Invalid admin API key")
        if session_token and admin_session_user(session_token, now=timezone.now()) is not None:
            return None
        return ApiError(BodyCode.SESSION_REQUIRED, "Admin session required")
    finally:
        # Called from a worker thread outside Django's request cycle: give the connection back.
        connection.close()
