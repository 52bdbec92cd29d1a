"""The answer to a ``previous_response_id`` the request's client key does not own (issue 34).

A response belongs to the key whose request produced it. Another key presenting its id gets
what it would get for an id that never existed — with no upstream call: the proxy does not
send the id anywhere (the owner's account would know it), replay its history or let it steer
the scheduler. An id unknown to the proxy ("external") is still tried on one account untouched
(spec §5.3); when that account answers ``previous_response_not_found``, the client gets the
same canonical answer built here instead of the upstream's bytes (``for_upstream_refusal``), so
the two cases cannot be told apart by their body, whatever the upstream's JSON formatting or
its WebSocket error-frame wrapping:

    400 {"error": {"message": "Previous response with id '<id>' not found.",
                   "type": "invalid_request_error", "param": "previous_response_id",
                   "code": "previous_response_not_found"}}

(OpenAI's own answer for an unknown id.) A connection-local continuation (``store:false``)
over the WebSocket is an exception: no upstream call is made for an unknown id there either —
no pooled socket has it — so both get 400 ``previous_response_unavailable``.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.dispatch.transport_choice import TransportMode, is_connection_local, transport_mode
from proxy.domain.client_errors import PREVIOUS_RESPONSE_UNAVAILABLE, ClientError
from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.failures import AttemptFailure, history_error_code

CODE = "previous_response_not_found"


def _error(previous_response_id: str) -> dict[str, Any]:
    return {
        "message": f"Previous response with id '{previous_response_id}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": CODE,
    }


def not_found(previous_response_id: str) -> ClientError:
    """OpenAI's 400 for a previous id nobody (that this key may see) produced."""
    error = _error(previous_response_id)
    body = json.dumps({"error": error}).encode()
    return ClientError(400, error["type"], CODE, error["message"], raw_body=body)


def never_existed(request: DispatchRequest, *, compact: bool = False) -> ClientError:
    """What ``request`` gets for its previous id when that id is another key's (or nobody's),
    built without asking the upstream."""
    over_websocket = not compact and transport_mode(request) is not TransportMode.HTTP_ONLY
    if over_websocket and is_connection_local(request):
        return PREVIOUS_RESPONSE_UNAVAILABLE
    return not_found(request.previous_response_id or "")


def for_upstream_refusal(
    error: ClientError, failure: AttemptFailure, request: DispatchRequest
) -> ClientError:
    """``error`` (what the upstream's refusal ``failure`` becomes), or the canonical
    ``not_found`` when the upstream said it does not know the request's previous id."""
    if (
        error.raw_body is not None
        and request.previous_response_id
        and history_error_code(failure) == CODE
    ):
        return not_found(request.previous_response_id)
    return error
