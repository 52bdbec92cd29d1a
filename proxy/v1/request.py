"""A ``/v1`` HTTP request as the handler and its view share it.

The handler learns three things before it reads the body — when the request arrived, whose key
it carries, what the key's policy admitted — and the view needs all three. They travel in this
one typed object, passed to the view explicitly (``view(request, v1=…)``), not as attributes
set on Django's request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.http import HttpRequest
from django.http.response import HttpResponseBase

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


class V1View(Protocol):
    """A ``/v1`` view as Django calls it, ``(request, …)``, and as the handler does (``v1=``)."""

    def __call__(
        self, request: HttpRequest, /, *args: Any, v1: V1Request | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, HttpResponseBase]: ...


def v1_view(view: Callable[..., Coroutine[Any, Any, HttpResponseBase]]) -> V1View:
    """Let ``view(v1: V1Request, …)`` be called as Django calls a view, ``(request, …)``: the
    ``/v1`` handler passes the ``V1Request`` it built (``v1=``); a call through Django's URL
    resolver (another method than POST) gets a fresh one."""

    @functools.wraps(view)
    async def wrapper(
        request: HttpRequest, /, *args: Any, v1: V1Request | None = None, **kwargs: Any
    ) -> HttpResponseBase:
        return await view(v1 if v1 is not None else V1Request(http=request), *args, **kwargs)

    return wrapper
