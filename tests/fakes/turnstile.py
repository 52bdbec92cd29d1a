"""A fake Cloudflare Turnstile on a real local HTTP server: the widget script, the widget's
frame and Siteverify.

* ``GET /turnstile/v0/api.js`` — a ``window.turnstile`` with ``render`` / ``reset`` /
  ``remove`` / ``getResponse``. As the real one, ``render`` puts the widget in an iframe of
  Turnstile's own origin (so the page's CSP ``frame-src`` is exercised) and calls the
  ``onload`` callback named in the script URL.
* ``GET /turnstile/v0/widget`` — the frame: it mints a token bound to the site key, the parent
  page's hostname, ``action`` and ``cData`` it was rendered with, shows "Success!", and posts the
  token to the parent page, whose ``callback`` then receives it. An unknown site key shows an
  error and calls ``error-callback`` instead.
* ``POST /turnstile/v0/siteverify`` — Cloudflare's verdict, in its wire format: a token is
  valid for 300 s and only once (a second verify answers ``timeout-or-duplicate``, except a
  retry with the same ``idempotency_key``, which gets the first verdict again); a wrong secret
  answers ``invalid-input-secret``.

Tests mint tokens without a browser with ``issue_token``, read what Siteverify received with
``siteverify_requests()``, and inject faults with ``fail_siteverify`` / ``reject_next`` /
``answer_next`` / ``hold_siteverify``.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer, RecordedRequest
from tests.fakes.telegram.records import Hold

SITE_KEY = "0x4AAAAAAAFakeSiteKeyForTests"
SECRET_KEY = "0x4AAAAAAAFakeSecretKeyForTests0000000"
TOKEN_LIFETIME_SECONDS = 300
SITEVERIFY_PATH = "/turnstile/v0/siteverify"


@dataclass
class IssuedToken:
    site_key: str
    hostname: str
    action: str
    cdata: str
    issued_at: float
    # The idempotency key of the Siteverify call that spent it, and that call's answer.
    spent_with: str | None = None
    first_answer: dict | None = None


@dataclass
class SiteverifyFault:
    # "status" (HTTP ``status``, HTML body), "disconnect", "not_json" (200, not JSON),
    # "internal_error" (200, success false + internal-error), "malformed" (200, a JSON list),
    # "slow" (answers normally after ``delay`` seconds)
    mode: str
    status: int = 500
    delay: float = 0.0
    remaining: int = 1


@dataclass
class Widget:
    """One rendered widget, as the fake's frame saw it."""

    site_key: str
    hostname: str
    action: str
    cdata: str
    token: str | None
    extra: dict = field(default_factory=dict)


class FakeTurnstile:
    def __init__(self, *, site_key: str = SITE_KEY, secret_key: str = SECRET_KEY) -> None:
        self.site_key = site_key
        self.secret_key = secret_key
        self._lock = threading.Lock()
        self._tokens: dict[str, IssuedToken] = {}
        self._faults: list[SiteverifyFault] = []
        self._overrides: list[dict] = []
        self._hold: Hold | None = None
        self._widget_numbers = itertools.count(1)
        self.widgets: list[Widget] = []
        self._server = LocalHTTPServer(self._application)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeTurnstile:
        self._server.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._hold is not None:
                self._hold.release()
        self._server.stop()

    def __enter__(self) -> FakeTurnstile:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        return self._server.url

    @property
    def script_url(self) -> str:
        return f"{self._server.url}/turnstile/v0/api.js"

    @property
    def siteverify_url(self) -> str:
        return f"{self._server.url}{SITEVERIFY_PATH}"

    # ------------------------------------------------------------------ tokens and inspection

    def issue_token(
        self,
        *,
        cdata: str,
        hostname: str = "testserver",
        action: str = "hodor_verify",
        site_key: str | None = None,
    ) -> str:
        """A token as the widget would hand it to a page of ``hostname``."""
        token = f"XXXX.DUMMY.TOKEN.{secrets.token_urlsafe(24)}"
        with self._lock:
            self._tokens[token] = IssuedToken(
                site_key=site_key or self.site_key,
                hostname=hostname,
                action=action,
                cdata=cdata,
                issued_at=time.time(),
            )
        return token

    def age_token(self, token: str, *, seconds: float) -> None:
        with self._lock:
            self._tokens[token].issued_at -= seconds

    def siteverify_requests(self) -> list[RecordedRequest]:
        return self._server.requests_to(SITEVERIFY_PATH)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return self._server.requests_to(path)

    # ------------------------------------------------------------------ fault injection

    def fail_siteverify(
        self, mode: str = "status", *, status: int = 500, times: int = 1, delay: float = 0.0
    ) -> None:
        with self._lock:
            self._faults.append(SiteverifyFault(mode, status, delay, times))

    def reject_next(self, *error_codes: str) -> None:
        """The next Siteverify answers ``success: false`` with ``error_codes``."""
        self.answer_next({"success": False, "error-codes": list(error_codes)})

    def answer_next(self, fields: dict) -> None:
        """The next Siteverify answer (of a known token) has ``fields`` replaced."""
        with self._lock:
            self._overrides.append(fields)

    def hold_siteverify(self) -> Hold:
        """Pause the next Siteverify call until released."""
        hold = Hold()
        with self._lock:
            self._hold = hold
        return hold

    # ------------------------------------------------------------------ HTTP

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application()
        application.router.add_get("/turnstile/v0/api.js", self._api_script)
        application.router.add_get("/turnstile/v0/widget", self._widget)
        application.router.add_post(SITEVERIFY_PATH, self._siteverify)
        return application

    async def _api_script(self, request: web.Request) -> web.Response:
        script = API_SCRIPT.replace("__ORIGIN__", json.dumps(self.origin))
        return web.Response(
            text=script,
            content_type="application/javascript",
            headers={"Cache-Control": "no-store"},
        )

    async def _widget(self, request: web.Request) -> web.Response:
        query = request.query
        site_key = query.get("sitekey", "")
        parent = query.get("parent", "")
        widget_id = query.get("widget", "")
        hostname = urlsplit(parent).hostname or ""
        token = None
        if site_key == self.site_key:
            token = self.issue_token(
                cdata=query.get("cdata", ""),
                hostname=hostname,
                action=query.get("action", ""),
            )
        with self._lock:
            self.widgets.append(
                Widget(site_key, hostname, query.get("action", ""), query.get("cdata", ""), token)
            )
        message = (
            {"source": "fake-turnstile", "widget": widget_id, "event": "complete", "token": token}
            if token
            else {"source": "fake-turnstile", "widget": widget_id, "event": "error", "code": 110100}
        )
        page = WIDGET_PAGE.format(
            label=html.escape("Success!" if token else "Error: invalid sitekey"),
            mark="✔" if token else "✖",
            colour="#1a7f37" if token else "#cf222e",
            message=json.dumps(message),
            parent=json.dumps(parent),
        )
        return web.Response(text=page, content_type="text/html")

    async def _siteverify(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            hold, self._hold = self._hold, None
            fault = self._faults[0] if self._faults else None
            if fault is not None:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.pop(0)
        if hold is not None:
            hold.arrived.set()
            await asyncio.get_running_loop().run_in_executor(None, hold.released.wait, 30)
        if fault is not None:
            if fault.mode == "slow":
                await asyncio.sleep(fault.delay)
            elif fault.mode == "trickle":
                return await self._trickle(request, fault)
            else:
                return self._fault_response(request, fault)
        if request.content_type == "application/json":
            try:
                form = json.loads(await request.read())
            except ValueError:
                form = {}
        else:
            form = dict(await request.post())
        form = form if isinstance(form, dict) else {}
        return web.json_response(self._verdict(form))

    @staticmethod
    def _fault_response(request: web.Request, fault: SiteverifyFault) -> web.StreamResponse:
        if fault.mode == "disconnect":
            request.transport.abort()
            return web.Response(status=500)
        if fault.mode == "not_json":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        if fault.mode == "internal_error":
            return web.json_response({"success": False, "error-codes": ["internal-error"]})
        if fault.mode == "malformed":
            return web.json_response(["success"])
        if fault.mode == "huge":
            # A well-formed verdict padded past any sane size (1 MiB).
            padding = "x" * (1024 * 1024)
            return web.json_response({"success": True, "error-codes": [], "padding": padding})
        if fault.mode == "deep":
            # JSON nested deeper than Python's parser recurses (within a few KiB).
            return web.Response(text="[" * 20_000 + "]" * 20_000, content_type="application/json")
        return web.Response(
            status=fault.status, text="<html>error</html>", content_type="text/html"
        )

    @staticmethod
    async def _trickle(request: web.Request, fault: SiteverifyFault) -> web.StreamResponse:
        """A verdict sent one byte every ``delay`` seconds: no single read waits long, the
        whole answer takes minutes."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for byte in json.dumps({"success": True, "error-codes": []}).encode():
                await response.write(bytes([byte]))
                await asyncio.sleep(fault.delay)
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client gave up, as it should
        return response

    def _verdict(self, form: dict) -> dict:
        secret = form.get("secret")
        token = form.get("response")
        key = form.get("idempotency_key")
        if not secret:
            return _failure("missing-input-secret")
        if secret != self.secret_key:
            return _failure("invalid-input-secret")
        if not token:
            return _failure("missing-input-response")
        with self._lock:
            issued = self._tokens.get(token)
            if issued is None:
                return _failure("invalid-input-response")
            if issued.spent_with is not None:
                if key is not None and key == issued.spent_with:
                    return issued.first_answer
                return _failure("timeout-or-duplicate")
            if time.time() - issued.issued_at > TOKEN_LIFETIME_SECONDS:
                return _failure("timeout-or-duplicate")
            answer = {
                "success": True,
                "challenge_ts": datetime.fromtimestamp(issued.issued_at, UTC).isoformat(),
                "hostname": issued.hostname,
                "error-codes": [],
                "action": issued.action,
                "cdata": issued.cdata,
                "metadata": {"ephemeral_id": f"x:{secrets.token_hex(10)}"},
            }
            if issued.site_key != self.site_key:
                answer = _failure("invalid-input-response")
            if self._overrides:
                answer = {**answer, **self._overrides.pop(0)}
            issued.spent_with = key or f"spent-{secrets.token_hex(4)}"
            issued.first_answer = answer
            return answer


def _failure(*codes: str) -> dict:
    return {"success": False, "error-codes": list(codes), "messages": []}


API_SCRIPT = r"""
(function () {
  "use strict";
  var ORIGIN = __ORIGIN__;
  var widgets = {};
  var counter = 0;
  var current = document.currentScript;

  window.addEventListener("message", function (event) {
    if (event.origin !== ORIGIN) { return; }
    var data = event.data || {};
    var widget = widgets[data.widget];
    if (data.source !== "fake-turnstile" || !widget) { return; }
    if (data.event === "complete") {
      widget.token = data.token;
      if (typeof widget.params.callback === "function") { widget.params.callback(data.token); }
    } else if (data.event === "error") {
      var handler = widget.params["error-callback"];
      if (typeof handler === "function") { handler(data.code); }
    }
  });

  function frameUrl(id, params) {
    var query = new URLSearchParams({
      sitekey: params.sitekey || "",
      action: params.action || "",
      cdata: params.cData || "",
      parent: window.location.origin,
      widget: id,
      attempt: String(widgets[id] ? widgets[id].attempts : 0)
    });
    return ORIGIN + "/turnstile/v0/widget?" + query.toString();
  }

  function render(container, params) {
    var element = typeof container === "string" ? document.querySelector(container) : container;
    counter += 1;
    var id = "cf-chl-widget-" + counter;
    var frame = document.createElement("iframe");
    frame.title = "Widget containing a Cloudflare security challenge";
    frame.width = "300";
    frame.height = "65";
    frame.style.border = "0";
    widgets[id] = { params: params || {}, frame: frame, token: undefined, attempts: 0 };
    frame.src = frameUrl(id, widgets[id].params);
    element.appendChild(frame);
    return id;
  }

  function reset(id) {
    var widget = widgets[id];
    if (!widget) { return; }
    widget.token = undefined;
    widget.attempts += 1;
    widget.frame.src = frameUrl(id, widget.params);
  }

  function remove(id) {
    var widget = widgets[id];
    if (!widget) { return; }
    widget.frame.remove();
    delete widgets[id];
  }

  function getResponse(id) {
    return widgets[id] ? widgets[id].token : undefined;
  }

  window.turnstile = { render: render, reset: reset, remove: remove, getResponse: getResponse };
  var onload = current ? new URL(current.src).searchParams.get("onload") : null;
  if (onload && typeof window[onload] === "function") {
    window.setTimeout(function () { window[onload](); }, 0);
  }
})();
"""

WIDGET_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Turnstile</title>
<style>
  body {{ margin: 0; font: 14px system-ui, sans-serif; }}
  .box {{ box-sizing: border-box; width: 300px; height: 65px; border: 1px solid #d0d7de;
          background: #fafafa; display: flex; align-items: center; padding: 0 16px; }}
  .mark {{ color: {colour}; font-size: 24px; margin-right: 12px; }}
  .brand {{ margin-left: auto; color: #6e7781; font-size: 11px; }}
</style></head>
<body><div class="box"><span class="mark">{mark}</span><span>{label}</span>
<span class="brand">FAKE TURNSTILE</span></div>
<script>
  window.parent.postMessage({message}, {parent});
</script>
</body></html>
"""
