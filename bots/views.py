"""The bot's HTTP endpoints under ``/telegram/`` (spec §1.2). Each parses, calls one function,
responds. Any other path or method under ``/telegram/`` is a plain-text 404."""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bots.pipeline.webhook import SECRET_HEADER, webhook_handle
from bots.registration import webhook_register, webhook_unregister
from bots.selfcheck import selfcheck_run
from bots.selfcheck_throttle import selfcheck_slot_take
from bots.version import app_version


def not_found(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
    return HttpResponse("Not Found", status=404, content_type="text/plain; charset=utf-8")


class AlwaysJSON(BaseContentNegotiation):
    """Answer JSON whatever the client's Accept header says (Telegram, browsers, curl)."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> None:
        return None

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


class BotEndpoint(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes: list = []
    renderer_classes = [JSONRenderer]  # compact JSON: {"status":"ok",...}
    content_negotiation_class = AlwaysJSON

    # DRF finalizes any HttpResponse; its stubs narrow these two to return a Response.
    def http_method_not_allowed(  # type: ignore[override]
        self, request: HttpRequest, *args: object, **kwargs: object
    ) -> HttpResponse:
        return not_found(request)

    def options(  # type: ignore[override]
        self, request: HttpRequest, *args: object, **kwargs: object
    ) -> HttpResponse:
        return not_found(request)


def _origin(request: Request) -> str:
    """The origin Telegram reached us at (scheme and host as seen through trusted proxies)."""
    return f"{request.scheme}://{request.get_host()}"


class TelegramWebhookView(BotEndpoint):
    """``POST /telegram/webhook``: one Telegram update, processed inline."""

    def post(self, request: Request) -> Response:
        result = webhook_handle(
            body=request.body,
            secret_header=request.headers.get(SECRET_HEADER),
            now=timezone.now(),
            origin=_origin(request),
        )
        return Response(result.body, status=result.status)


class SetWebhookView(BotEndpoint):
    """``GET /telegram/setwebhook/<ADMIN_SECRET>``."""

    def get(self, request: Request, secret: str) -> Response:
        result = webhook_register(
            presented_secret=secret, origin=_origin(request), now=timezone.now()
        )
        return Response(result.body, status=result.status)


class DeleteWebhookView(BotEndpoint):
    """``GET /telegram/deletewebhook/<ADMIN_SECRET>``."""

    def get(self, request: Request, secret: str) -> Response:
        result = webhook_unregister(presented_secret=secret)
        return Response(result.body, status=result.status)


class HealthView(BotEndpoint):
    """``GET /telegram/health``: liveness only, touches nothing."""

    def get(self, request: Request) -> Response:
        return Response({"status": "ok", "version": app_version()})


class SelfcheckView(BotEndpoint):
    """``GET /telegram/selfcheck``: environment, verification config, tables, webhook.

    Beyond a few checks a second (across workers) it answers 429 without calling Telegram."""

    def get(self, request: Request) -> Response:
        if not selfcheck_slot_take(now=timezone.now()):
            return Response(
                {"error": "too_many_requests", "retry_after": 1},
                status=429,
                headers={"Retry-After": "1"},
            )
        result = selfcheck_run(origin=_origin(request))
        return Response(result.body, status=result.status)
