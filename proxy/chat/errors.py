"""Errors of the chat translation layer, each carrying what the view needs to answer."""

from __future__ import annotations

from typing import Any


class ChatRequestInvalid(Exception):
    """A `/v1/chat/completions` body the proxy cannot translate; the view answers HTTP 400.

    `envelope()` is the OpenAI error body (`{"error": {message, type, param, code}}`).
    """

    status_code = 400

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        """Return the OpenAI error envelope for this rejection."""
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


class ChatUpstreamError(Exception):
    """The upstream Responses stream did not end in a usable terminal event.

    Raised by `ChatStreamTranslator.completion()`. The view only asks for a completion once the
    dispatcher has read a successful terminal event (it fails over or answers the client's error
    itself otherwise), so there these mean a broken invariant and end as a 500.
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ChatUpstreamFailed(ChatUpstreamError):
    """The upstream ended with `response.failed` or an `error` event.

    `error` is the upstream error object as sent (`{"code", "message", ...}`).
    """

    def __init__(self, message: str, code: str, error: dict[str, Any]) -> None:
        super().__init__(message, code)
        self.error = error


class ChatUpstreamTruncated(ChatUpstreamError):
    """The upstream stream ended without any terminal event."""
