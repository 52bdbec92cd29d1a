"""The answer to a ``previous_response_id`` the request's client key does not own (issue 34).

A response belongs to the key whose request produced it. Another key presenting its id gets
what it would get for an id that never existed — with no upstream call: the proxy does not
send the id anywhere (the owner's account would know it), replay its history or let it steer
the scheduler. An unknown ("external") id is tried on one account untouched and the upstream's
400 is passed through (spec §5.3); this module builds that same answer, byte for byte in its
body, for the transport the request would have used:

* over HTTP SSE (``use_websocket:false``, the WebSocket turned off, and compact): the
  upstream's JSON body;
* over the upstream WebSocket (a previous id requires it, spec §1.8): the upstream's error
  frame, which the proxy passes through as the body (spec §1.7);
* a connection-local continuation (``store:false``) over the WebSocket: no upstream call is
  made for an unknown id either — no pooled socket has it — so it is 400
  ``previous_response_unavailable``.

The bodies are the upstream's as the fake upstream (``tests/fakes/codex.py``) reproduces them:
default ``json.dumps`` separators, OpenAI's message, type, param and code.
"""

from __future__ import annotations

import json

from proxy.dispatch.client_errors import PREVIOUS_RESPONSE_UNAVAILABLE, ClientError
from proxy.dispatch.transport_choice import TransportMode, is_connection_local, transport_mode
from proxy.dispatch.types import DispatchRequest

CODE = "previous_response_not_found"


def _error(previous_response_id: str) -> dict:
    return {
        "message": f"Previous response with id '{previous_response_id}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": CODE,
    }


def http_body(previous_response_id: str) -> bytes:
    """The upstream's HTTP 400 body for an id its account does not know."""
    return json.dumps({"error": _error(previous_response_id)}).encode()


def websocket_frame(previous_response_id: str) -> bytes:
    """The upstream WebSocket's error frame for an id its account does not know."""
    frame = {"type": "error", "status": 400, "error": _error(previous_response_id), "headers": {}}
    return json.dumps(frame).encode()


def never_existed(request: DispatchRequest, *, compact: bool = False) -> ClientError:
    """What ``request`` gets for its previous id when that id is another key's (or nobody's):
    the answer an id unknown to every account gets, built without asking the upstream."""
    previous_response_id = request.previous_response_id or ""
    mode = TransportMode.HTTP_ONLY if compact else transport_mode(request)
    if mode is TransportMode.HTTP_ONLY:
        body = http_body(previous_response_id)
    elif is_connection_local(request):
        return PREVIOUS_RESPONSE_UNAVAILABLE
    else:
        body = websocket_frame(previous_response_id)
    error = _error(previous_response_id)
    return ClientError(400, error["type"], CODE, error["message"], raw_body=body)
