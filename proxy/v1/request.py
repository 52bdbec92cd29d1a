"""A ``/v1`` HTTP request as the handler and its view share it.

The handler learns three things before it reads the body — when the request arrived, whose key
it carries, what the key's policy admitted — and the view needs all three. They travel in this
one typed object, passed to the view explicitly (``view(request, v1=…)``), not as attributes
set on Django's request.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from django.http import HttpRequest

from proxy.domain.dispatch_types import RequestTiming
from proxy.domain.early_admission import EarlyAdmission
from proxy.v1.auth import AuthenticatedClient


@dataclass
class V1Request:
    http: HttpRequest
    # x-cpr-overhead-ms counts from its creation: the handler makes it at the request's arrival.
    timing: RequestTiming = field(default_factory=RequestTiming)
    # (request id, client) of a key checked before the body was read; the view reuses it.
    authenticated: tuple[str, AuthenticatedClient] | None = None
    # The admission the key's policy made before the body, for the dispatch to take over.
    early_admission: EarlyAdmission | None = None


def v1_view(view):
    """Let ``view(v1: V1Request, …)`` be called as Django calls a view, ``(request, …)``: the
    ``/v1`` handler passes the ``V1Request`` it built (``v1=``); a call through Django's URL
    resolver (another method than POST) gets a fresh one."""

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args, v1: V1Request | None = None, **kwargs):
        return await view(v1 if v1 is not None else V1Request(http=request), *args, **kwargs)

    return wrapper
