"""ASGI guard: request bodies under ``/v1/`` may be at most 16 MiB (spec §1.1).

Django would spool any body to disk before a view could refuse it; this rejects an oversized
body with 413 as soon as its Content-Length (or the bytes received so far) say so.
"""

from __future__ import annotations

import json
import uuid

_TOO_LARGE = json.dumps(
    {
        "error": {
            "message": "Request body is larger than 16 MiB",
            "type": "invalid_request_error",
            "code": "request_too_large",
        }
    }
).encode()


class RequestBodyLimit:
    def __init__(self, application, *, prefix: str, limit: int):
        self.application = application
        self.prefix = prefix
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.application(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    if int(value) > self.limit:
                        return await self._reject(send)
                except ValueError:
                    pass
        received = 0
        rejected = False

        async def limited_receive():
            nonlocal received, rejected
            message = await receive()
            if message["type"] == "http.request" and not rejected:
                received += len(message.get("body", b""))
                if received > self.limit:
                    rejected = True
                    await self._reject(send)
                    # Django stops reading and sends nothing on a disconnect.
                    return {"type": "http.disconnect"}
            return message

        return await self.application(scope, limited_receive, send)

    async def _reject(self, send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"x-request-id", f"req_{uuid.uuid4()}".encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _TOO_LARGE})
