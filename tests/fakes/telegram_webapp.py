"""Telegram's side of a Mini App: a fake ``telegram-web-app.js`` on a real local HTTP server, and
``initData`` signed the way Telegram signs it.

Telegram opens a Mini App's URL with its launch parameters in the URL fragment
(``#tgWebAppData=<initData>&tgWebAppVersion=…&tgWebAppPlatform=…``); the real
``telegram-web-app.js`` reads them from there into ``window.Telegram.WebApp.initData``. The fake
does the same, so a test "opens the button" by loading ``launch_url(...)`` in a browser, and a
page opened without the fragment is a page opened outside Telegram (``initData`` is ``""``, as
with the real script). ``ready()``, ``expand()`` and ``close()`` are recorded on
``window.__fakeTelegramWebApp`` for tests to read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import quote, urlencode

from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer
from tests.fakes.telegram.records import FakeUser

SCRIPT_PATH = "/js/telegram-web-app.js"


def sign_init_data(
    bot_token: str,
    user: FakeUser | dict,
    *,
    auth_date: int | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """``initData`` for ``user`` as Telegram builds it for the bot of ``bot_token``: the fields
    form-encoded, ``hash`` = hex HMAC-SHA256 of the sorted data-check-string under
    HMAC-SHA256("WebAppData", bot token)."""
    user_json = user.as_json() if isinstance(user, FakeUser) else user
    fields = {
        "query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
        "user": json.dumps(user_json, separators=(",", ":"), ensure_ascii=False),
        "auth_date": str(int(time.time()) if auth_date is None else auth_date),
        "signature": "fake-ed25519-signature-kept-in-the-check-string",
        **(extra or {}),
    }
    check_string = "\n".join(f"{key}={fields[key]}" for key in sorted(fields))
    secret = hmac.new(b"WebAppData", bot_token.encode(), hashlib.sha256).digest()
    fields["hash"] = hmac.new(secret, check_string.encode(), hashlib.sha256).hexdigest()
    return urlencode(fields, quote_via=quote)


def launch_url(page_url: str, init_data: str, *, platform: str = "tdesktop") -> str:
    """The URL Telegram's client loads when the user presses the Mini App button."""
    fragment = urlencode(
        {"tgWebAppData": init_data, "tgWebAppVersion": "8.0", "tgWebAppPlatform": platform},
        quote_via=quote,
    )
    return f"{page_url}#{fragment}"


class FakeTelegramWebApp:
    """Serves the fake ``telegram-web-app.js`` (what telegram.org serves for real)."""

    def __init__(self) -> None:
        self._server = LocalHTTPServer(self._application)

    def start(self) -> FakeTelegramWebApp:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> FakeTelegramWebApp:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def script_url(self) -> str:
        return f"{self._server.url}{SCRIPT_PATH}"

    def script_requests(self) -> int:
        return len(self._server.requests_to(SCRIPT_PATH))

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application()
        application.router.add_get(SCRIPT_PATH, self._script)
        return application

    async def _script(self, request: web.Request) -> web.Response:
        return web.Response(
            text=WEB_APP_SCRIPT,
            content_type="application/javascript",
            headers={"Cache-Control": "no-store"},
        )


WEB_APP_SCRIPT = r"""
(function () {
  "use strict";
  var launch = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  var initData = launch.get("tgWebAppData") || "";
  var unsafe = {};
  if (initData) {
    new URLSearchParams(initData).forEach(function (value, key) {
      if (key === "user") {
        try { unsafe.user = JSON.parse(value); } catch (error) { unsafe.user = null; }
      } else {
        unsafe[key] = value;
      }
    });
  }
  var recorded = { ready: 0, expand: 0, close: 0 };
  window.__fakeTelegramWebApp = recorded;
  window.Telegram = window.Telegram || {};
  window.Telegram.WebApp = {
    initData: initData,
    initDataUnsafe: unsafe,
    version: launch.get("tgWebAppVersion") || "6.0",
    platform: launch.get("tgWebAppPlatform") || "unknown",
    colorScheme: "light",
    themeParams: {},
    isExpanded: false,
    ready: function () { recorded.ready += 1; },
    expand: function () { recorded.expand += 1; this.isExpanded = true; },
    close: function () { recorded.close += 1; }
  };
})();
"""
