"""Cloudflare Turnstile's Siteverify API (spec §8.4): is a widget's token genuine?

``POST <TURNSTILE_VERIFY_URL>`` with JSON ``{secret, response, idempotency_key}``, 5 s timeout.
A call returns ``SiteverifyAnswer`` (Cloudflare's verdict, ``success`` true or false) or raises
``SiteverifyUnavailableError``:

* transient — a network failure or timeout, HTTP ≥ 500, a body that is not JSON, or
  ``error-codes`` holding ``internal-error``: retried once after 300 ms with the same idempotency
  key (Cloudflare then answers the first verdict again instead of "duplicate"); still transient
  ⇒ unavailable (``permanent`` False);
* any other HTTP status, JSON that is not Siteverify's shape, or an answer longer than
  MAX_ANSWER_BYTES (64 KiB; a real one is a few hundred bytes) ⇒ unavailable at once
  (``permanent`` True).

The 5 s is the whole call's: connecting, and reading the whole answer (an answer trickling in
byte by byte is cut off there, not after 5 s per read).

The secret and the token are never logged nor put in an error text; the underlying ``requests``
exception is not kept (its text names the URL).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import requests

from bots.clients.outgoing import outgoing_session
from common import clock

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
MAX_ANSWER_BYTES = 64 * 1024
READ_SIZE = 8192
RETRY_DELAY_SECONDS = 0.3
INTERNAL_ERROR = "internal-error"

_session: requests.Session | None = None
_session_lock = threading.Lock()


def _shared_session() -> requests.Session:
    global _session
    with _session_lock:
        if _session is None:
            _session = outgoing_session(timeout=TIMEOUT_SECONDS, pool_connections=2, pool_maxsize=8)
        return _session


@dataclass(frozen=True)
class SiteverifyAnswer:
    """Cloudflare's verdict on one token. ``hostname``, ``action`` and ``cdata`` are what the
    widget was rendered with (None when Cloudflare left them out)."""

    success: bool
    error_codes: tuple[str, ...]
    hostname: str | None
    action: str | None
    cdata: str | None


class SiteverifyUnavailableError(Exception):
    """No verdict could be had. ``str(error)`` is safe to log (no secret, token or URL)."""

    def __init__(self, description: str, *, permanent: bool) -> None:
        self.permanent = permanent
        super().__init__(description)


class _Transient(Exception):
    pass


class _TooLong(Exception):
    pass


class _TooSlow(Exception):
    pass


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class SiteverifyClient:
    def __init__(
        self,
        *,
        verify_url: str,
        secret: str,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        self._verify_url = verify_url
        self._secret = secret
        self._session = session or _shared_session()
        self._sleep = sleep
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"SiteverifyClient(verify_url={self._verify_url!r})"

    def verify(self, *, token: str, idempotency_key: str | None = None) -> SiteverifyAnswer:
        """Cloudflare's verdict on ``token``; raises SiteverifyUnavailableError.

        One logical call: its retry carries the same ``idempotency_key`` (a fresh UUID when
        none is given).
        """
        key = idempotency_key or str(uuid.uuid4())
        payload = {"secret": self._secret, "response": token, "idempotency_key": key}
        try:
            return self._attempt(payload)
        except _Transient as first:
            logger.info("siteverify: %s; retrying once", first)
            self._sleep(RETRY_DELAY_SECONDS)
        try:
            return self._attempt(payload)
        except _Transient as second:
            raise SiteverifyUnavailableError(str(second), permanent=False) from None

    def _attempt(self, payload: dict) -> SiteverifyAnswer:
        deadline = clock.monotonic() + self._timeout
        try:
            response = self._session.post(
                self._verify_url,
                json=payload,
                timeout=self._timeout,
                allow_redirects=False,
                stream=True,
            )
            try:
                status = response.status_code
                raw = self._read_capped(response, deadline) if status == 200 else b""
            finally:
                response.close()
        except requests.RequestException as error:
            failure = type(error).__name__
        except _TooSlow:
            failure = f"answer not complete within {self._timeout:g}s"
        except _TooLong:
            raise SiteverifyUnavailableError(
                f"HTTP 200: answer longer than {MAX_ANSWER_BYTES // 1024} KiB", permanent=True
            ) from None
        else:
            return self._classify(status, raw)
        raise _Transient(f"network error: {failure}")

    @staticmethod
    def _read_capped(response: requests.Response, deadline: float) -> bytes:
        """The body, read as it comes (each read returns what has arrived) until the end, at
        most MAX_ANSWER_BYTES (raises _TooLong) and until ``deadline`` (raises _TooSlow)."""
        body = bytearray()
        while True:
            try:
                chunk = response.raw.read1(READ_SIZE, decode_content=True)
            except Exception as error:  # urllib3's own errors: a failed read of the answer
                raise requests.ConnectionError() from error
            if not chunk:
                return bytes(body)
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise _TooLong()
            if clock.monotonic() > deadline:
                raise _TooSlow()

    @staticmethod
    def _classify(status: int, raw: bytes) -> SiteverifyAnswer:
        if status >= 500:
            raise _Transient(f"HTTP {status}")
        if status != 200:
            raise SiteverifyUnavailableError(f"HTTP {status}", permanent=True)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            # Not JSON (a proxy's error page, say), or nested past what the parser follows.
            raise _Transient("HTTP 200: body is not JSON") from None
        codes = body.get("error-codes") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(body.get("success"), bool):
            raise SiteverifyUnavailableError("HTTP 200: not a Siteverify answer", permanent=True)
        error_codes = tuple(
            code for code in (codes if isinstance(codes, list) else ()) if isinstance(code, str)
        )
        if INTERNAL_ERROR in error_codes:
            raise _Transient(f"HTTP 200: {INTERNAL_ERROR}")
        return SiteverifyAnswer(
            success=body["success"],
            error_codes=error_codes,
            hostname=_text_or_none(body.get("hostname")),
            action=_text_or_none(body.get("action")),
            cdata=_text_or_none(body.get("cdata")),
        )
