"""The ceiling: a bare Python pass-through (aiohttp server + aiohttp client).

No auth, no scheduling, no ledger: each request is forwarded to the upstream and its bytes are
streamed back. Whatever the project costs on top of this is the price of its features.

    python -m bench.passthrough --port 9101 --upstream http://127.0.0.1:9100
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web


def build_application(upstream: str) -> web.Application:
    session_holder: dict[str, aiohttp.ClientSession] = {}

    async def open_session(application: web.Application) -> None:
        session_holder["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

    async def close_session(application: web.Application) -> None:
        await session_holder["session"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with session_holder["session"].post(
            upstream + request.path, data=body, headers={"Content-Type": "application/json"}
        ) as upstream_response:
            response = web.StreamResponse(
                status=upstream_response.status,
                headers={
                    "Content-Type": upstream_response.headers.get("Content-Type", "text/plain")
                },
            )
            await response.prepare(request)
            async for chunk in upstream_response.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    application = web.Application()
    application.on_startup.append(open_session)
    application.on_cleanup.append(close_session)
    application.router.add_post("/v1/responses", forward)
    application.router.add_post("/v1/chat/completions", forward)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    arguments = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        build_application(arguments.upstream),
        host="127.0.0.1",
        port=arguments.port,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
