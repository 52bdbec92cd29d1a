"""The ``ops_error_logs`` row of a ``/v1`` request that failed in a way nothing expected (an
exception the view did not handle): the client gets the 500 envelope (or an error frame on the
client WebSocket) and the operators a row naming the route, the request id and the kind of
exception — never its text, which may quote the request."""

from __future__ import annotations

from django.utils import timezone

from proxy.ledger import writer as ledger
from proxy.ledger.entries import LedgerEntry
from telemetry.services.facts import ErrorFact

UNEXPECTED_FAILURE_MESSAGE = "v1 request failed unexpectedly"
UNEXPECTED_FAILURE_CLASS = "internal_error"


def record_unexpected_failure(
    error: BaseException,
    *,
    request_id: str,
    route: str,
    client_ip: str | None,
    user_agent: str | None,
) -> None:
    """Hand the failure's row to the ledger writer of this event loop (written after the
    answer, like every ledger row). Call it from the handler that answers the 500."""
    ledger.submit(
        LedgerEntry(
            errors=[
                ErrorFact(
                    request_id=request_id,
                    route=route[:200],
                    created_at=timezone.now(),
                    message=UNEXPECTED_FAILURE_MESSAGE,
                    status_code=500,
                    client_status_code=500,
                    failure_class=UNEXPECTED_FAILURE_CLASS,
                    metadata={
                        "failed": True,
                        "errorKind": UNEXPECTED_FAILURE_CLASS,
                        "exceptionType": type(error).__name__,
                        "failureSource": "proxy",
                        "clientIp": client_ip,
                        "userAgent": user_agent,
                    },
                )
            ]
        )
    )
