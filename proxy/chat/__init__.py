"""OpenAI Chat Completions ⇄ Responses translation for `/v1/chat/completions` (framework-free).

Request side: `chat_request_to_responses(body) -> ChatPlan`. Response side: one
`ChatStreamTranslator` per request, fed every upstream event; `finish()` / `error_chunks()` end a
stream and `completion()` gives the non-stream object. See each module's docstring.
"""

from proxy.chat.errors import (
    ChatRequestInvalid,
    ChatUpstreamError,
    ChatUpstreamFailed,
    ChatUpstreamTruncated,
)
from proxy.chat.request import ChatPlan, chat_request_to_responses
from proxy.chat.response import ChatStreamTranslator

__all__ = [
    "ChatPlan",
    "ChatRequestInvalid",
    "ChatStreamTranslator",
    "ChatUpstreamError",
    "ChatUpstreamFailed",
    "ChatUpstreamTruncated",
    "chat_request_to_responses",
]
