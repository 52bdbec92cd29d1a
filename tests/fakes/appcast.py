"""A fake Codex Desktop appcast (Sparkle RSS, as persistent.oaistatic.com serves it).

``GET /codex-app-prod/appcast.xml`` answers the releases set with ``publish`` (newest first),
or the HTTP status set with ``fail``.
"""

from __future__ import annotations

import threading
from xml.sax.saxutils import quoteattr

from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer

PATH = "/codex-app-prod/appcast.xml"


class FakeAppcast:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._releases: list[tuple[str, str]] = []
        self._status: int | None = None
        self._as_attributes = False
        self.server = LocalHTTPServer(self._application)

    def start(self) -> FakeAppcast:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def appcast_url(self) -> str:
        return f"{self.server.url}{PATH}"

    def reset(self) -> None:
        with self._lock:
            self._releases, self._status, self._as_attributes = [], None, False
        self.server.clear()

    def publish(self, *releases: tuple[str, str], as_attributes: bool = False) -> None:
        """Serve these (version, build) releases, newest first. ``as_attributes``: the version
        fields as ``sparkle:`` attributes of ``<enclosure>`` (older appcasts) instead of
        elements of ``<item>``."""
        with self._lock:
            self._releases = list(releases)
            self._status = None
            self._as_attributes = as_attributes

    def fail(self, status: int) -> None:
        with self._lock:
            self._status = status

    def document(self) -> str:
        with self._lock:
            releases, as_attributes = list(self._releases), self._as_attributes
        items = []
        for version, build in releases:
            url = quoteattr(
                f"https://persistent.oaistatic.com/codex-app-prod/Codex-darwin-arm64-{version}.zip"
            )
            if as_attributes:
                items.append(
                    f"<item><title>{version}</title><pubDate>Mon, 01 Jun 2026 10:00:00 +0000"
                    f"</pubDate><enclosure url={url} sparkle:version={quoteattr(build)}"
                    f' sparkle:shortVersionString={quoteattr(version)} length="1"'
                    ' type="application/octet-stream"/></item>'
                )
            else:
                items.append(
                    f"<item><title>{version}</title><pubDate>Mon, 01 Jun 2026 10:00:00 +0000"
                    f"</pubDate><sparkle:version>{build}</sparkle:version>"
                    f"<sparkle:shortVersionString>{version}</sparkle:shortVersionString>"
                    "<sparkle:minimumSystemVersion>13.0</sparkle:minimumSystemVersion>"
                    f'<enclosure url={url} length="187654321" type="application/octet-stream"'
                    ' sparkle:edSignature="c2lnbmF0dXJl"/></item>'
                )
        return (
            '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"'
            ' xmlns:sparkle="http://www.andymatuschak.org/xml-namespaces/sparkle"'
            ' xmlns:dc="http://purl.org/dc/elements/1.1/"><channel><title>Codex</title>'
            + "".join(items)
            + "</channel></rss>"
        )

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application()
        application.router.add_get(PATH, self._appcast)
        return application

    async def _appcast(self, request: web.Request) -> web.Response:
        with self._lock:
            status = self._status
        if status is not None:
            return web.Response(status=status, text="unavailable")
        return web.Response(text=self.document(), content_type="application/xml")
