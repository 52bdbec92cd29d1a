"""A fake OpenAI OAuth server (auth.openai.com): real HTTP, real token shapes, rotating
single-use refresh tokens.

* ``POST /oauth/token`` ``grant_type=refresh_token``: a known, unused refresh token gets a new
  JWT access token and a new refresh token (the old one is spent). A spent one is rejected the
  way the real server does: 401 ``{"error": {"message": "Your refresh token has already been
  used…", "type": "invalid_request_error", "param": null, "code": "refresh_token_reused"}}``;
  an unknown one: 401 with code ``token_expired`` ("Could not validate your token…").
* ``POST /oauth/token`` ``grant_type=authorization_code``: a code issued by ``/oauth/authorize``
  (single use, PKCE S256 checked against ``code_verifier``, same ``redirect_uri``).
* ``GET /oauth/authorize``: "the user logs in" as ``authorize_identity`` and is redirected (302)
  to ``redirect_uri?code=…&state=…``.

Access tokens are real JWTs (HS256 with a key of the fake's) whose payload carries
``https://api.openai.com/auth`` (``chatgpt_account_id``, ``chatgpt_user_id``,
``chatgpt_plan_type``), ``https://api.openai.com/profile`` (``email``) and ``exp``.
Failures can be programmed per refresh token (``fail(token, kind, ...)``; ``drip`` answers 200
and sends its body a byte at a time, never finishing in time), answers delayed
(``delay``), and the fake counts the token calls in flight at once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field

import jwt
from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer

DRIP_INTERVAL = 0.2
SIGNING_KEY = "fake-oauth-signing-key-not-a-secret"
CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"
REUSED_BODY = {
    "error": {
        "message": "Your refresh token has already been used to generate a new access token. "
        "Please try signing in again.",
        "type": "invalid_request_error",
        "param": None,
        "code": "refresh_token_reused",
    }
}
UNKNOWN_BODY = {
    "error": {
        "message": "Could not validate your token. Please try signing in again.",
        "type": "invalid_request_error",
        "param": None,
        "code": "token_expired",
    }
}
INVALID_GRANT_BODY = {
    "error": "invalid_grant",
    "error_description": "The provided authorization grant is invalid, expired or revoked.",
}
DEACTIVATED_BODY = {
    "error": {
        "message": "Your OpenAI account has been deactivated, please check your email.",
        "type": "invalid_request_error",
        "param": None,
        "code": "account_deactivated",
    }
}


@dataclass(frozen=True)
class Identity:
    account_id: str
    user_id: str
    plan_type: str = "plus"
    email: str | None = None


def access_token_for(identity: Identity, *, expires_in: float, now: float | None = None) -> str:
    """A JWT shaped like a ChatGPT access token for ``identity``."""
    issued = int(now if now is not None else time.time())
    payload = {
        "iss": "https://auth.openai.com",
        "aud": ["https://api.openai.com/v1"],
        "sub": f"auth0|{identity.user_id}",
        "iat": issued,
        "nbf": issued,
        "exp": int(issued + expires_in),
        "jti": uuid.uuid4().hex,
        "scp": ["openid", "profile", "email", "offline_access"],
        "https://api.openai.com/auth": {
            "chatgpt_account_id": identity.account_id,
            "chatgpt_user_id": identity.user_id,
            "chatgpt_plan_type": identity.plan_type,
            "user_id": identity.user_id,
        },
        "https://api.openai.com/profile": {"email": identity.email, "email_verified": True},
    }
    return jwt.encode(payload, SIGNING_KEY, algorithm="HS256", headers={"kid": "fake"})


@dataclass
class Failure:
    # "reused" | "invalid_grant" | "unknown" | "deactivated" | "status" | "drop" | "drip"
    kind: str
    status: int = 503


@dataclass
class _Code:
    identity: Identity
    challenge: str
    redirect_uri: str


@dataclass
class FakeOAuthServer:
    expires_in: float = 3600
    rotate: bool = True
    delay: float = 0.0
    authorize_identity: Identity | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _refresh: dict[str, Identity] = field(default_factory=dict)
    _spent: set[str] = field(default_factory=set)
    _codes: dict[str, _Code] = field(default_factory=dict)
    _failures: dict[str, deque[Failure]] = field(default_factory=lambda: defaultdict(deque))
    in_flight: int = 0
    max_in_flight: int = 0
    issued_access_tokens: list[str] = field(default_factory=list)
    issued_refresh_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = LocalHTTPServer(self._application)

    # -- control (from the test thread)

    def start(self) -> FakeOAuthServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def reset(self) -> None:
        with self._lock:
            self._refresh.clear()
            self._spent.clear()
            self._codes.clear()
            self._failures.clear()
            self.in_flight = self.max_in_flight = 0
            self.issued_access_tokens.clear()
            self.issued_refresh_tokens.clear()
            self.expires_in, self.rotate, self.delay = 3600, True, 0.0
            self.authorize_identity = None
        self.server.clear()

    def issue(self, identity: Identity, *, expires_in: float | None = None) -> tuple[str, str]:
        """A fresh (access token, refresh token) pair for ``identity``, as after a login."""
        with self._lock:
            return self._issue(identity, expires_in)

    def fail(self, refresh_token: str, *kinds: str, status: int = 503) -> None:
        """The next calls with ``refresh_token`` (or authorization code) fail this way, in
        order."""
        with self._lock:
            self._failures[refresh_token].extend(Failure(kind, status) for kind in kinds)

    def token_calls(self) -> list[dict[str, str]]:
        """The form of every ``/oauth/token`` request, in arrival order."""
        from urllib.parse import parse_qsl

        requests = self.server.requests_to("/oauth/token")
        return [dict(parse_qsl(request.body.decode())) for request in requests]

    def is_spent(self, refresh_token: str) -> bool:
        with self._lock:
            return refresh_token in self._spent

    def is_live(self, refresh_token: str) -> bool:
        with self._lock:
            return refresh_token in self._refresh and refresh_token not in self._spent

    # -- serving

    def _issue(self, identity: Identity, expires_in: float | None) -> tuple[str, str]:
        access = access_token_for(identity, expires_in=expires_in or self.expires_in)
        refresh = "rt_" + secrets.token_urlsafe(24)
        self._refresh[refresh] = identity
        self.issued_access_tokens.append(access)
        self.issued_refresh_tokens.append(refresh)
        return access, refresh

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application()
        application.router.add_post("/oauth/token", self._token)
        application.router.add_get("/oauth/authorize", self._authorize)
        return application

    async def _token(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            form = dict(await request.post())
            if form.get("client_id") != CLIENT_ID:
                return web.json_response(
                    {"error": "invalid_client", "error_description": "Unknown client"}, status=401
                )
            if form.get("grant_type") == "refresh_token":
                return await self._refresh_grant(request, form)
            if form.get("grant_type") == "authorization_code":
                return await self._code_grant(request, form)
            return web.json_response(
                {"error": "unsupported_grant_type", "error_description": "Unsupported grant"},
                status=400,
            )
        finally:
            with self._lock:
                self.in_flight -= 1

    def _tokens_response(self, identity: Identity, *, keep: str | None = None) -> web.Response:
        access, refresh = self._issue(identity, None)
        body = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": int(self.expires_in),
            "scope": "openid profile email offline_access",
            "id_token": access_token_for(identity, expires_in=self.expires_in),
        }
        if keep is None:
            body["refresh_token"] = refresh
        return web.json_response(body)

    async def _drip(self, request: web.Request) -> web.StreamResponse:
        """A 200 whose body arrives one byte every ``DRIP_INTERVAL`` seconds, for a minute:
        every read finishes well inside any read timeout, the answer never does."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await response.write(b" ")
            await asyncio.sleep(DRIP_INTERVAL)
        await response.write(b"{}")
        return response

    async def _refresh_grant(self, request: web.Request, form: dict) -> web.StreamResponse:
        token = str(form.get("refresh_token") or "")
        with self._lock:
            queue = self._failures.get(token)
            failure = queue.popleft() if queue else None
            if failure is None:
                if token in self._spent:
                    return web.json_response(REUSED_BODY, status=401)
                identity = self._refresh.get(token)
                if identity is None:
                    return web.json_response(UNKNOWN_BODY, status=401)
                if self.rotate:
                    self._spent.add(token)
                    return self._tokens_response(identity)
                return self._tokens_response(identity, keep=token)
        return await self._failure_response(request, failure)

    async def _failure_response(self, request: web.Request, failure: Failure) -> web.StreamResponse:
        if failure.kind == "reused":
            return web.json_response(REUSED_BODY, status=401)
        if failure.kind == "unknown":
            return web.json_response(UNKNOWN_BODY, status=401)
        if failure.kind == "invalid_grant":
            return web.json_response(INVALID_GRANT_BODY, status=400)
        if failure.kind == "deactivated":
            return web.json_response(DEACTIVATED_BODY, status=401)
        if failure.kind == "drop":
            request.transport.close()
            raise asyncio.CancelledError
        if failure.kind == "drip":
            return await self._drip(request)
        return web.json_response({"error": "server_error"}, status=failure.status)

    async def _code_grant(self, request: web.Request, form: dict) -> web.StreamResponse:
        with self._lock:
            queue = self._failures.get(str(form.get("code") or ""))
            failure = queue.popleft() if queue else None
        if failure is not None:
            return await self._failure_response(request, failure)
        with self._lock:
            code = self._codes.pop(str(form.get("code") or ""), None)
            if code is None:
                return web.json_response(INVALID_GRANT_BODY, status=400)
            verifier = str(form.get("code_verifier") or "")
            challenge = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                .rstrip(b"=")
                .decode()
            )
            if challenge != code.challenge or form.get("redirect_uri") != code.redirect_uri:
                return web.json_response(INVALID_GRANT_BODY, status=400)
            return self._tokens_response(code.identity)

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        required = ("response_type", "client_id", "redirect_uri", "scope", "state")
        if (
            any(not query.get(name) for name in required)
            or query.get("client_id") != CLIENT_ID
            or query.get("code_challenge_method") != "S256"
            or not query.get("code_challenge")
        ):
            return web.json_response({"error": "invalid_request"}, status=400)
        with self._lock:
            identity = self.authorize_identity
            if identity is None:
                return web.json_response({"error": "access_denied"}, status=403)
            code = "ac_" + secrets.token_urlsafe(24)
            self._codes[code] = _Code(identity, query["code_challenge"], query["redirect_uri"])
        location = f"{query['redirect_uri']}?code={code}&state={query['state']}"
        raise web.HTTPFound(location)
