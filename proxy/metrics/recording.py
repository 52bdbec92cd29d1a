"""What fills the instruments: the finished dispatch report (one call, from
``proxy/dispatch/request_outcome.py``), each token refresh, each written ledger batch. Never raises:
a metric must not fail a request."""

from __future__ import annotations

import logging

from common import clock
from proxy.domain.dispatch_types import DispatchReport
from proxy.metrics import instruments

logger = logging.getLogger(__name__)


def client_status(report: DispatchReport) -> str:
    """The HTTP status the client got: the error's; 200 for an answer (a committed stream is
    a 200 whatever happened after its first byte); ``unknown`` when the dispatch ended by an
    exception before any answer (the client left, or an unexpected failure the view logs)."""
    if report.client_error is not None:
        return str(report.client_error.status)
    return "200" if report.served is not None else "unknown"


def record_dispatch(report: DispatchReport) -> None:
    try:
        _record_dispatch(report)
    except Exception:
        logger.warning("request metrics not recorded", exc_info=True)


def _record_dispatch(report: DispatchReport) -> None:
    request = report.request
    instruments.REQUESTS.labels(
        route=request.route,
        status=client_status(report),
        model=request.model,
        key_id=request.client_api_key_id or "",
    ).inc()
    instruments.REQUEST_DURATION.labels(route=request.route).observe(request.elapsed_ms() / 1000)
    served = report.served
    if served is not None and served.progress is not None and served.progress.first_token_ms:
        instruments.FIRST_TOKEN.labels(route=request.route).observe(
            served.progress.first_token_ms / 1000
        )
    last = len(report.notes) - 1
    for position, note in enumerate(report.notes):
        failure = note.failure
        outcome = "ok" if failure is None else failure.kind.value
        instruments.UPSTREAM_ATTEMPTS.labels(outcome=outcome).inc()
        # A failure followed by an attempt on another account moved the request on (a retry
        # on the same account after a token refresh is not a failover).
        if (
            failure is not None
            and position < last
            and report.notes[position + 1].account_id != note.account_id
        ):
            instruments.FAILOVERS.labels(reason=failure.kind.value).inc()


def record_refused_before_dispatch(
    route: str, status: int, key_id: str, *, elapsed_seconds: float
) -> None:
    """A request its key's policy refused before its body was read: counted as a refusal in
    the dispatch is, with an empty model (the body, which names it, was never read)."""
    try:
        instruments.REQUESTS.labels(route=route, status=str(status), model="", key_id=key_id).inc()
        instruments.REQUEST_DURATION.labels(route=route).observe(elapsed_seconds)
    except Exception:
        logger.warning("request metrics not recorded", exc_info=True)


def record_token_refresh(result: str) -> None:
    try:
        instruments.TOKEN_REFRESHES.labels(result=result).inc()
    except Exception:
        logger.warning("token refresh metric not recorded", exc_info=True)


def record_ledger_batch(entry_count: int, oldest_created_monotonic: float | None) -> None:
    try:
        instruments.LEDGER_BATCH_ROWS.observe(entry_count)
        if oldest_created_monotonic is not None:
            instruments.LEDGER_LAG.observe(max(0.0, clock.monotonic() - oldest_created_monotonic))
    except Exception:
        logger.warning("ledger metrics not recorded", exc_info=True)
