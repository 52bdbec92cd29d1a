"""The typed failures of a ChatGPT backend call."""

from __future__ import annotations


class CodexError(Exception):
    """A backend call that produced no usable answer."""

    #: Whether asking again (the same request, the same account) cannot help.
    permanent: bool = False


class CodexTransportError(CodexError):
    """No HTTP answer arrived, or the body broke off: connect error, timeout, reset."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class CodexHTTPError(CodexError):
    """The backend answered with a status other than the call's success.

    ``headers`` are lower-cased; ``body`` holds at most ``ERROR_BODY_READ_CAP`` bytes;
    ``set_cookies`` are the ``Set-Cookie`` values of every answer of the call (its 5xx retries
    included). 429 and 5xx are not permanent (later, or another try, may succeed); any other
    4xx is.
    """

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes,
        *,
        set_cookies: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.headers = headers
        self.body = body
        self.set_cookies = set_cookies

    @property
    def permanent(self) -> bool:  # type: ignore[override]
        return self.status != 429 and self.status < 500


class CodexContinuationUnavailable(CodexError):
    """A connection-local continuation (spec §2.7: ``store:false`` and a previous response id
    known only to one pooled upstream WebSocket) cannot be served.

    ``reason`` is one of ``pool_unavailable``, ``fresh_connection_required``,
    ``connection_busy``, ``latest_response_mismatch``, ``reused_connection_lost``. The dispatch
    recovers by full replay where it has one (spec §5.3); without it ``connection_busy``
    answers 503 ``continuation_connection_busy``.
    """

    permanent = True

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
