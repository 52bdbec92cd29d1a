"""Finding 6 beyond /v1: every other route refuses a body over 1 MiB before Django spools any
of it (declared or chunked), and a body within the cap still reaches its view."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.proxy.conftest import LiveServer

ONE_MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    live = LiveServer()
    yield live
    live.stop()


def _post(port: int, path: str, *, length: int | None, chunks: list[bytes] = (), **headers):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.putrequest("POST", path)
        if length is not None:
            connection.putheader("Content-Length", str(length))
        else:
            connection.putheader("Transfer-Encoding", "chunked")
        connection.putheader("Content-Type", "application/json")
        for name, value in headers.items():
            connection.putheader(name.replace("_", "-"), value)
        connection.endheaders()
        for chunk in chunks:
            data = chunk if length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk)
            try:
                connection.send(data)
            except OSError:
                break  # the server answered and closed while we were still sending
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/telegram/webhook", "/admin/login/"])
def test_a_declared_body_over_one_mib_is_refused_before_it_is_read(server, path):
    status, body = _post(server.port, path, length=50 * ONE_MIB)  # no byte of it is sent

    assert status == 413
    assert json.loads(body) == {"error": "request_too_large", "limit_bytes": ONE_MIB}


def test_a_chunked_body_is_cut_off_as_it_passes_one_mib(server):
    status, body = _post(server.port, "/telegram/webhook", length=None, chunks=[b"x" * 65536] * 20)

    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


def test_a_body_within_the_cap_reaches_the_view(server):
    payload = b'{"update_id": 1, "pad": "' + b"x" * (ONE_MIB - 100) + b'"}'

    status, body = _post(server.port, "/telegram/webhook", length=len(payload), chunks=[payload])

    # The webhook itself answered: no secret configured/presented means 401 (nothing written).
    assert status == 401
    assert json.loads(body) == {"error": "unauthorized"}
