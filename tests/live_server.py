"""The project's ASGI application served by a real uvicorn in a thread of the test process (same
settings, same database), over plain http or over https with a throwaway certificate.

Tests that make requests from another process (a browser, a CLI) use it; their data must be
committed (``transactional_db``) because the server's threads have their own connections.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import uvicorn

from config.embedded import free_port


class LiveASGIServer:
    """uvicorn serving ``config.asgi`` on 127.0.0.1:<free port>; ``certificate_dir`` given: over
    https with a certificate for 127.0.0.1 minted there (browsers must ignore its issuer)."""

    def __init__(self, *, certificate_dir: Path | None = None) -> None:
        from config.asgi import application

        self.port = free_port()
        self.scheme = "http"
        options: dict = {}
        if certificate_dir is not None:
            options = self._tls_options(certificate_dir)
            self.scheme = "https"
        self.server = uvicorn.Server(
            uvicorn.Config(
                application,
                host="127.0.0.1",
                port=self.port,
                lifespan="on",
                log_level="warning",
                # As config.run serves: forwarding headers are the project's to judge
                # (TRUSTED_PROXIES), not uvicorn's (it trusts 127.0.0.1 by default).
                proxy_headers=False,
                **options,
            )
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="live-server")
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("live server did not start")
            time.sleep(0.02)

    @staticmethod
    def _tls_options(directory: Path) -> dict:
        import trustme

        authority = trustme.CA()
        certificate = authority.issue_cert("127.0.0.1")
        key_file = directory / "server.key"
        chain_file = directory / "server.pem"
        certificate.private_key_pem.write_to_path(str(key_file))
        with chain_file.open("wb") as chain:
            for blob in certificate.cert_chain_pems:
                chain.write(blob.bytes())
        return {"ssl_keyfile": str(key_file), "ssl_certfile": str(chain_file)}

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
