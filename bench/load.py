"""An async load generator (aiohttp): N concurrent clients for D seconds against one URL.

Each request is a streamed completion read to its end (a ``ws://`` URL: one client WebSocket
per worker, ``response.create`` frames one after another, each read to its terminal event);
latency, time to first byte and errors are recorded. The generator reports its own CPU time
per request, so a reader can tell it was not the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

MAX_ERROR_SAMPLES = 5


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    elapsed_seconds: float = 0.0
    cpu_seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    first_byte_ms: list[float] = field(default_factory=list)
    # The project's own x-cpr-overhead-ms of each answer (targets that send it).
    overhead_ms: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    def record(
        self, ok: bool, *, started: float, first_byte: float | None, finished: float
    ) -> None:
        """One request: an error, or its latency and time to first byte."""
        self.requests += 1
        if not ok:
            self.errors += 1
            return
        self.latencies_ms.append((finished - started) * 1000)
        self.first_byte_ms.append(((first_byte or finished) - started) * 1000)

    def merge(self, other: LoadResult) -> None:
        """Add ``other`` (another measurement of the same target) to this one."""
        self.requests += other.requests
        self.errors += other.errors
        self.elapsed_seconds += other.elapsed_seconds
        self.cpu_seconds += other.cpu_seconds
        self.latencies_ms += other.latencies_ms
        self.first_byte_ms += other.first_byte_ms
        self.overhead_ms += other.overhead_ms
        self.error_samples += other.error_samples[: MAX_ERROR_SAMPLES - len(self.error_samples)]


async def _one(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict, result: LoadResult
) -> None:
    started = time.perf_counter()
    first_byte = None
    tail = b""
    finished_event = False
    try:
        async with session.post(url, data=body, headers=headers) as response:
            overhead = response.headers.get("x-cpr-overhead-ms")
            if overhead is not None:
                result.overhead_ms.append(float(overhead))
            async for chunk in response.content.iter_any():
                if first_byte is None:
                    first_byte = time.perf_counter()
                tail = (tail + chunk)[-64:]
                # A Responses stream ends with its terminal event ([DONE] is optional there).
                finished_event = finished_event or b"response.completed" in chunk
            ok = response.status == 200 and (b"[DONE]" in tail or finished_event)
            if not ok and len(result.error_samples) < MAX_ERROR_SAMPLES:
                result.error_samples.append(f"status {response.status}: {tail[-60:]!r}")
    except (aiohttp.ClientError, TimeoutError) as error:
        ok = False
        if len(result.error_samples) < MAX_ERROR_SAMPLES:
            result.error_samples.append(type(error).__name__)
    result.record(ok, started=started, first_byte=first_byte, finished=time.perf_counter())


TERMINAL_TYPES = ("response.completed", "response.failed", "response.incomplete", "error")


async def _one_on_socket(
    socket: aiohttp.ClientWebSocketResponse, frame: str, result: LoadResult
) -> None:
    """One ``response.create`` on an open client WebSocket, read to its terminal event."""
    started = time.perf_counter()
    first_byte = None
    ok = False
    try:
        await socket.send_str(frame)
        async for message in socket:
            if first_byte is None:
                first_byte = time.perf_counter()
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            kind = json.loads(message.data).get("type")
            if kind in TERMINAL_TYPES:
                ok = kind == "response.completed"
                if not ok and len(result.error_samples) < MAX_ERROR_SAMPLES:
                    result.error_samples.append(message.data[:60])
                break
    except (aiohttp.ClientError, TimeoutError) as error:
        if len(result.error_samples) < MAX_ERROR_SAMPLES:
            result.error_samples.append(type(error).__name__)
    result.record(ok, started=started, first_byte=first_byte, finished=time.perf_counter())


def conversation_payload(payload: dict, number: int) -> dict:
    """Load client ``number``'s body: its own conversation (as concurrent Codex sessions are;
    the proxy's affinity and upstream WebSocket pool key by conversation)."""
    return {**payload, "prompt_cache_key": f"bench-conversation-{number}"}


async def introduce_conversations(
    *, url: str, payload: dict, headers: dict, numbers: range, gap_seconds: float = 0.06
) -> None:
    """One request for each conversation of ``numbers``, one after another with a gap.

    Sessions of real clients start at different moments, and the pool spreads them over its
    accounts as it learns each account's load (the ledger writes every 50 ms); affinity then
    keeps each conversation on its account. Started all at once with nothing yet to tell the
    accounts apart, every new conversation would go to the same one and stay there — and past
    the upstream WebSocket pool's per-account cap each request would open a one-shot socket.
    """
    headers = {"Content-Type": "application/json", **headers}
    result = LoadResult()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        for number in numbers:
            own = conversation_payload(payload, number)
            if url.startswith("ws"):
                frame = json.dumps({"type": "response.create", **own})
                async with session.ws_connect(url, headers=headers) as socket:
                    await _one_on_socket(socket, frame, result)
            else:
                await _one(session, url, json.dumps(own).encode(), headers, result)
            await asyncio.sleep(gap_seconds)


async def run_load(
    *, url: str, payload: dict, headers: dict, concurrency: int, duration: float
) -> LoadResult:
    headers = {"Content-Type": "application/json", **headers}
    result = LoadResult()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        deadline = time.perf_counter() + duration
        cpu_started = time.process_time()
        started = time.perf_counter()

        async def worker(number: int) -> None:
            own = conversation_payload(payload, number)
            body = json.dumps(own).encode()
            if url.startswith("ws"):
                # A WebSocket client: one socket per worker, its requests one after another.
                frame = json.dumps({"type": "response.create", **own})
                async with session.ws_connect(url, headers=headers) as socket:
                    while time.perf_counter() < deadline:
                        await _one_on_socket(socket, frame, result)
                return
            while time.perf_counter() < deadline:
                await _one(session, url, body, headers, result)

        await asyncio.gather(*(worker(number) for number in range(concurrency)))
        result.elapsed_seconds = time.perf_counter() - started
        result.cpu_seconds = time.process_time() - cpu_started
    return result
