"""The fake-server helper itself: real HTTP on loopback, requests recorded in wire order."""

from __future__ import annotations

import requests
from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer


def _application(server: LocalHTTPServer) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path, "body": (await request.read()).decode()})

    application = web.Application()
    application.router.add_post("/echo", echo)
    return application


def test_local_server_answers_over_http_and_records_headers_in_order():
    with LocalHTTPServer(_application) as server:
        response = requests.post(
            f"{server.url}/echo",
            data=b"hello",
            headers={"Zeta": "1", "Alpha": "2", "Content-Type": "text/plain"},
            timeout=5,
        )

    assert response.json() == {"path": "/echo", "body": "hello"}
    [recorded] = server.requests_to("/echo")
    names = [name for name, _ in recorded.headers]
    assert names.index("Zeta") < names.index("Alpha")
    assert recorded.body == b"hello"
    assert recorded.header("alpha") == "2"
