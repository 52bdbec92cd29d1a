"""The Turnstile verification endpoints under ``/telegram/`` (spec §1.2, §5.5).

* ``GET /telegram/verify?r=<64 hex>`` — the Mini App page (a Django template). ``r`` is a request
  id, not an identity: the page reads and writes nothing; a malformed ``r`` is a plain-text 400.
* ``POST /telegram/api/verify/turnstile`` — the submit API (``bots.verification.submit``).

Plain Django views rather than DRF: the API's steps are ordered (the Origin check before the
content type, the content type before the 16 KiB limit), so the body is read here, bounded, and
never parsed by a framework first. Other methods are the plain-text 404 of every unknown
``/telegram/`` route.
"""

from __future__ import annotations

import json
import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt

from bots import texts
from bots.conf import load_config
from bots.verification.page import content_security_policy, harden, new_nonce, page_context
from bots.verification.submit import (
    MAX_BODY_BYTES,
    SubmitResult,
    turnstile_submit,
    unavailable,
)
from bots.verification.turnstile import REQUEST_ID
from bots.views import not_found

logger = logging.getLogger(__name__)


def _origin(request: HttpRequest) -> str:
    return f"{request.scheme}://{request.get_host()}"


@xframe_options_exempt  # Telegram shows Mini Apps in a frame (Telegram Web, desktop)
def verify_page(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return not_found(request)
    values = request.GET.getlist("r")
    if len(values) != 1 or not REQUEST_ID.fullmatch(values[0]):
        return harden(
            HttpResponse(
                texts.verify_page_bad_link(),
                status=400,
                content_type="text/plain; charset=utf-8",
            )
        )
    config = load_config()
    nonce = new_nonce()
    response = render(
        request, "bots/verify.html", page_context(config, request_id=values[0], nonce=nonce)
    )
    response["Content-Security-Policy"] = content_security_policy(config, nonce=nonce)
    return harden(response)


def _read_bounded(request: HttpRequest) -> bytes | None:
    """The body, or None when it is larger than the API accepts (measured in bytes, whatever
    Content-Length says)."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        return None
    body = request.read(MAX_BODY_BYTES + 1)
    return None if len(body) > MAX_BODY_BYTES else body


def _json_response(result: SubmitResult) -> HttpResponse:
    response = HttpResponse(
        json.dumps(result.body, ensure_ascii=False, separators=(",", ":")),
        status=result.status,
        content_type="application/json; charset=utf-8",
    )
    for name, value in result.headers.items():
        response[name] = value
    return harden(response)


@csrf_exempt  # no cookies are involved: the Telegram initData signature authenticates
def turnstile_submit_view(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return not_found(request)
    try:
        result = turnstile_submit(
            origin_header=request.headers.get("Origin"),
            content_type=request.content_type or "",
            body=_read_bounded(request),
            request_origin=_origin(request),
            clock=timezone.now,
        )
    except DatabaseError:
        logger.exception("turnstile submit: database unavailable")
        result = unavailable()
    return _json_response(result)
