"""``GET /metrics``: Prometheus text format.

Access: with ``METRICS_TOKEN`` set, ``Authorization: Bearer <token>`` is required (compared
in constant time; 401 otherwise). Without it only clients on loopback or inside
``TRUSTED_PROXIES`` are answered (403 others) — the client address as ``config.middleware``
resolves it, so a request relayed by a trusted reverse proxy from outside is still refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from proxy.metrics.pool_state import PoolStateCollector

MULTIPROCESS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


class _Scrape:
    """What one scrape reports: the instruments (every process's, in multiprocess mode) and
    the gauges computed now."""

    def __init__(self) -> None:
        if os.environ.get(MULTIPROCESS_DIRECTORY_VARIABLE):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            self._sources: list[Collector] = [registry, PoolStateCollector()]
        else:
            self._sources = [REGISTRY, PoolStateCollector()]

    def collect(self):
        for source in self._sources:
            yield from source.collect()


def _client_allowed(request: HttpRequest) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "")
    except ValueError:
        return False
    if address.is_loopback:
        return True
    return any(address in network for network in settings.TRUSTED_PROXIES)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token = settings.METRICS_TOKEN
    if token:
        supplied = request.headers.get("authorization") or ""
        expected = f"Bearer {token}"
        # Digests of equal length: the comparison takes the same time whatever was sent.
        if not hmac.compare_digest(_digest(supplied), _digest(expected)):
            response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return None
    if not _client_allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return None


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        return refused
    response = HttpResponse(generate_latest(_Scrape()), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
