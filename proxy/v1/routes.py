"""The ``/v1`` POST routes, listed once: ``proxy/urls.py`` builds their URL patterns from this
table, and the ``/v1`` handler (``proxy/v1/handler.py``) serves them by exact path without
Django's URL resolver, checking their key before it reads the body."""

from __future__ import annotations

from proxy.v1 import chat, responses

# (exact path, view, URL name)
POST_ROUTES = (
    ("/v1/responses", responses.responses, "v1-responses"),
    ("/v1/responses/review", responses.responses_review, "v1-responses-review"),
    ("/v1/responses/compact", responses.responses_compact, "v1-responses-compact"),
    ("/v1/chat/completions", chat.chat_completions, "v1-chat-completions"),
)
POST_VIEWS = {route: view for route, view, _ in POST_ROUTES}
