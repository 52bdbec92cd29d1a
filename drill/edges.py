"""The connection-level attacks of issue 35 against the drill's running web process: sockets
that hold their headers back, an oversized header, cookie bombs, a WebSocket upgrade to an
unknown path, a flood of frames on one client WebSocket, large bodies from a key its policy
refuses. Run first in the bad-input part (``drill/fuzz.py``); each returns figures, and
``problems`` collects what broke."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import aiohttp
import requests

from drill.proxy_load import MODEL
from drill.system import System

# The drill's web closes a connection whose headers are not in after this long
# (WEB_HEADER_TIMEOUT_SECONDS in drill/system.py).
HEADER_TIMEOUT_SECONDS = 5
SLOW_SOCKETS = 200
# Correctness bound on a cookie bomb's answer (the quadratic parse took seconds).
COOKIE_ANSWER_SECONDS = 1.0
FLOOD_FRAMES = 30
FLOOD_FRAME_BYTES = 2 * 1024 * 1024
STALLED_BODY_BYTES = 15 * 1024 * 1024
STALLED_REQUESTS = 20
TERMINAL_EVENTS = ("response.completed", "response.failed", "response.incomplete", "error")


class Edges:
    def __init__(self, system: System) -> None:
        self.system = system
        self.problems: list[str] = []
        self.figures: dict[str, object] = {}

    def run(self) -> None:
        self.slow_headers()
        self.oversized_header()
        self.cookie_bombs()
        self.unknown_websocket_path()
        self.websocket_frame_flood()
        self.policy_before_body()

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.system.port), timeout=30)

    def slow_headers(self) -> None:
        sockets = [self._connect() for _ in range(SLOW_SOCKETS)]
        opened = time.monotonic()
        for connection in sockets[: SLOW_SOCKETS // 2]:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        closed_after: list[float] = []
        lock = threading.Lock()

        def watch(connection: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while connection.recv(4096):
                    pass
            with lock:
                closed_after.append(time.monotonic() - opened)

        watchers = [threading.Thread(target=watch, args=(s,), daemon=True) for s in sockets]
        for watcher in watchers:
            watcher.start()
        healthz = [requests.get(f"{self.system.base}/healthz", timeout=5).status_code]
        time.sleep(1)
        healthz.append(requests.get(f"{self.system.base}/healthz", timeout=5).status_code)
        for watcher in watchers:
            watcher.join(HEADER_TIMEOUT_SECONDS + 20)
        for connection in sockets:
            connection.close()
        longest = max(closed_after, default=float("inf"))
        self.figures["slow-header sockets closed"] = f"{len(closed_after)}/{SLOW_SOCKETS}"
        self.figures["slowest close after connect (s)"] = round(longest, 2)
        self.figures["/healthz meanwhile"] = healthz
        if len(closed_after) != SLOW_SOCKETS or longest > HEADER_TIMEOUT_SECONDS + 5:
            self.problems.append(
                f"slow-header sockets: {len(closed_after)} closed, {longest:.1f} s"
            )
        if healthz != [204, 204]:
            self.problems.append(f"/healthz answered {healthz} while sockets held their headers")

    def oversized_header(self) -> None:
        with self._connect() as connection:
            with contextlib.suppress(OSError):
                connection.sendall(
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 20)
                )
            answer = b""
            with contextlib.suppress(OSError):
                answer = connection.recv(4096)
        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.") else "none"
        self.figures["1 MiB header"] = status
        if status != "431":
            self.problems.append(f"a 1 MiB header was answered {status}, not 431")

    def cookie_bombs(self) -> None:
        answers = {}
        for path in ("/admin/login/", "/api/admin/auth/status", "/telegram/webhook", "/v1/models"):
            for size in (15_000, 80_000):
                bomb = 'a="' + "\\1" * (size // 2) + '"'
                started = time.monotonic()
                method = "POST" if path == "/telegram/webhook" else "GET"
                response = requests.request(
                    method, f"{self.system.base}{path}", headers={"Cookie": bomb}, timeout=60
                )
                took = time.monotonic() - started
                answers[f"{path} {size // 1000} KB"] = response.status_code
                if response.status_code >= 500 or took > COOKIE_ANSWER_SECONDS:
                    self.problems.append(
                        f"cookie bomb of {size} bytes on {path}: {response.status_code} "
                        f"in {took:.2f} s"
                    )
        self.figures["cookie bombs"] = answers

    def unknown_websocket_path(self) -> None:
        async def attempt(path: str) -> int:
            url = f"ws://127.0.0.1:{self.system.port}{path}"
            async with aiohttp.ClientSession() as session:
                try:
                    async with session.ws_connect(url):
                        return 101
                except aiohttp.WSServerHandshakeError as refused:
                    return refused.status

        statuses = [asyncio.run(attempt(path)) for path in ("/v1/nope", "/", "/admin/") * 10]
        self.figures["WebSocket to unknown paths"] = sorted(set(statuses))
        if set(statuses) != {404}:
            self.problems.append(f"WebSocket upgrades to unknown paths answered {set(statuses)}")

    def websocket_frame_flood(self) -> None:
        """One client socket, a request and then 30 × 2 MiB frames sent back to back: every
        frame gets its answer (served, or refused at once as one too many waiting), none a
        5xx, and the socket still serves a request afterwards."""
        url = f"ws://127.0.0.1:{self.system.port}/v1/responses"
        auth = {"Authorization": f"Bearer {self.system.client_key}"}
        large = json.dumps(
            {"type": "response.create", "model": MODEL, "input": "x" * FLOOD_FRAME_BYTES}
        )

        async def flood() -> tuple[list[dict], str]:
            endings: list[dict] = []
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(url, headers=auth, max_msg_size=0) as socket_,
            ):
                await socket_.send_str(json.dumps({"type": "response.create", "model": MODEL}))
                for _ in range(FLOOD_FRAMES):
                    await socket_.send_str(large)
                while len(endings) < FLOOD_FRAMES + 1:
                    event = json.loads((await socket_.receive(timeout=120)).data)
                    if event.get("type") in TERMINAL_EVENTS:
                        endings.append(event)
                await socket_.send_str(json.dumps({"type": "response.create", "model": MODEL}))
                while (last := json.loads((await socket_.receive(timeout=60)).data)).get(
                    "type"
                ) not in TERMINAL_EVENTS:
                    pass
            return endings, last["type"]

        try:
            endings, after = asyncio.run(flood())
        except (aiohttp.ClientError, TimeoutError, TypeError, ValueError) as error:
            self.problems.append(f"client WebSocket frame flood: {type(error).__name__}")
            return
        errors = [event for event in endings if event["type"] == "error"]
        refused = [e for e in errors if e.get("error", {}).get("code") == "request_already_waiting"]
        self.figures["WebSocket flood frames refused as waiting"] = f"{len(refused)}/{FLOOD_FRAMES}"
        server_errors = [event["status"] for event in errors if event.get("status", 0) >= 500]
        if server_errors:
            self.problems.append(f"client WebSocket flood: error frames {server_errors}")
        if after != "response.completed":
            self.problems.append(f"client WebSocket after the flood: {after}")

    def policy_before_body(self) -> None:
        """A key whose requests window is spent: 20 requests declaring 15 MiB bodies, none sent,
        are each answered 429 from their headers."""
        admin = {"x-api-key": self.system.admin_api_key}
        base = self.system.base
        created = requests.post(
            f"{base}/api/admin/keys", json={"name": "drill edges"}, headers=admin, timeout=30
        ).json()["data"]
        self.system.secrets.add("client key", created["key"])
        requests.put(
            f"{base}/api/admin/keys/policy",
            params={"id": created["id"]},
            json={"requestsPerMinute": 1},
            headers=admin,
            timeout=30,
        ).raise_for_status()
        first = requests.post(
            f"{base}/v1/responses",
            json={"model": MODEL, "input": "hi", "stream": False},
            headers={"Authorization": f"Bearer {created['key']}"},
            timeout=60,
        ).status_code
        statuses = []
        for _ in range(STALLED_REQUESTS):
            with self._connect() as connection:
                connection.sendall(
                    (
                        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Bearer {created['key']}\r\n"
                        f"Content-Type: application/json\r\n"
                        f"Content-Length: {STALLED_BODY_BYTES}\r\n\r\n"
                    ).encode()
                )
                answer = b""
                with contextlib.suppress(OSError):
                    answer = connection.recv(4096)
            statuses.append(
                answer.split(b" ", 2)[1].decode() if answer[:7] == b"HTTP/1." else "none"
            )
        self.figures["policy-refused 15 MiB bodies, unsent"] = sorted(set(statuses))
        if first != 200 or set(statuses) != {"429"}:
            self.problems.append(
                f"a spent key's unsent bodies: first {first}, then {sorted(set(statuses))}"
            )


def run_checks(system: System) -> tuple[dict[str, object], list[str]]:
    edges = Edges(system)
    edges.run()
    return edges.figures, edges.problems
