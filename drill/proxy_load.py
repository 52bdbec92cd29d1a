"""Part 1: the proxy under load with faults injected, then its ledger, buckets and slots checked.

Streamed ``/v1/responses`` and ``/v1/chat/completions`` (half each) at a fixed concurrency, each
with a unique ``x-request-id``, while a fault schedule (by progress: a share of the requests
done) FLUSHes the drill's Redis database, terminates the drill database's PostgreSQL
connections, and SIGTERMs then SIGKILLs one uvicorn worker of web. After each fault the time
until ``/healthz`` answers 204 again is measured.

What the client saw decides what the ledger must hold (seed 004 §4.7/§4.8/§5.2):

| the client saw | rows it must leave |
|---|---|
| a complete success | exactly one ``usage_records`` row, no ``ops_error_logs`` row |
| an error answer (4xx/5xx or a failure event) | exactly one ``ops_error_logs`` row, no usage row |
| the connection cut mid-answer | at most one row in all |

A success or error without its row is "lost": allowed only when it ended in the SIGKILL window
(the rows a web process holds for up to 50 ms, plus the batch being written); any other
loss, any duplicate and any request in both tables breaks an invariant.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, replace

import aiohttp

from drill.report import Part
from drill.secrets_scan import Scanner
from drill.system import System

MODEL = "gpt-5.4"
MESSAGES = [{"role": "user", "content": "hi"}]
# A request that ends this long before the SIGKILL (or shortly after it) may lose its row: the
# web process held it in its 50 ms batch or was writing the batch when it died.
KILL_WINDOW_BEFORE_SECONDS = 1.0
KILL_WINDOW_AFTER_SECONDS = 0.5
FAULTS = (
    (0.12, "flush_redis"),
    (0.25, "terminate_postgres"),
    (0.38, "sigterm_worker"),
    (0.50, "terminate_postgres"),
    (0.62, "flush_redis"),
    (0.75, "sigkill_worker"),
    (0.88, "terminate_postgres"),
)


@dataclass
class Outcome:
    request_id: str
    route: str
    ended: float = 0.0
    kind: str = "cut"  # "ok", "error" (an answer that says it failed) or "cut"
    status: int = 0
    code: str = ""


def _error_code(body: bytes) -> str:
    """The ``code`` of an error envelope or failure event in ``body`` (best effort)."""
    marker = body.find(b'"code"')
    if marker < 0:
        return ""
    tail = body[marker + 6 : marker + 80].lstrip(b": ")
    return tail[1 : tail.find(b'"', 1)].decode(errors="replace") if tail[:1] == b'"' else ""


def classify(route: str, status: int, body: bytes) -> tuple[str, str]:
    if status != 200:
        return "error", _error_code(body)
    if route == "responses":
        if b"response.failed" in body or b"event: error" in body:
            return "error", _error_code(body)
        return ("ok", "") if b"response.completed" in body else ("cut", "")
    if b'"error"' in body:
        return "error", _error_code(body)
    return ("ok", "") if b"data: [DONE]" in body else ("cut", "")


class Load:
    def __init__(self, system: System, scanner: Scanner, *, total: int, concurrency: int):
        self.system = system
        self.scanner = scanner
        self.total = total
        self.concurrency = concurrency
        self.outcomes: list[Outcome] = []
        self.issued = 0
        self.done = 0
        self.kills: list[float] = []  # monotonic times of SIGKILLs
        self.faults: list[dict] = []

    async def _one(self, session: aiohttp.ClientSession, index: int) -> None:
        route = "responses" if index % 2 == 0 else "chat"
        outcome = Outcome(request_id=f"drill-{os.getpid()}-{index:06d}", route=route)
        if route == "responses":
            url = f"{self.system.base}/v1/responses"
            payload = {"model": MODEL, "stream": True, "input": MESSAGES}
        else:
            url = f"{self.system.base}/v1/chat/completions"
            payload = {
                "model": MODEL,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
        headers = {
            "Authorization": f"Bearer {self.system.client_key}",
            "Content-Type": "application/json",
            "x-request-id": outcome.request_id,
            # Forwarded upstream: the fake's record says which requests the proxy dispatched.
            "x-client-request-id": outcome.request_id,
        }
        body = b""
        try:
            async with session.post(url, data=json.dumps(payload), headers=headers) as response:
                outcome.status = response.status
                body = await response.read()
                self.scanner.response(f"/v1/{route}", dict(response.headers), body)
                outcome.kind, outcome.code = classify(route, response.status, body)
        except (aiohttp.ClientError, TimeoutError) as error:
            outcome.kind, outcome.code = "cut", type(error).__name__
        outcome.ended = time.monotonic()
        self.outcomes.append(outcome)
        self.done += 1

    async def run(self, *, faults: bool = True, first_index: int = 0) -> float:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        started = time.monotonic()
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def client() -> None:
                while self.issued < self.total:
                    index = first_index + self.issued
                    self.issued += 1
                    await self._one(session, index)

            schedule = asyncio.create_task(self._faults()) if faults else None
            await asyncio.gather(*(client() for _ in range(self.concurrency)))
            if schedule is not None:
                await schedule
        return time.monotonic() - started

    # ------------------------------------------------------------------ faults

    async def _faults(self) -> None:
        """Each fault when its share of the requests is done; its recovery is measured
        alongside, so a slow recovery never delays the next fault."""
        recoveries = []
        for share, fault in FAULTS:
            while self.done < share * self.total:
                await asyncio.sleep(0.02)
            recoveries.append(asyncio.create_task(self._inject(fault)))
        await asyncio.gather(*recoveries)

    async def _inject(self, fault: str) -> None:
        record = {"fault": fault, "at_request": self.done}
        self.faults.append(record)
        injected = time.monotonic()
        record.update(await asyncio.to_thread(getattr(self, fault)))
        failed_probes = 0
        while not await asyncio.to_thread(self.system.healthy):
            failed_probes += 1
            await asyncio.sleep(0.05)
        record["healthz_recovery_s"] = time.monotonic() - injected
        record["healthz_failed_probes"] = failed_probes
        if "worker_pid" in record:
            victim = record.pop("worker_pid")
            await asyncio.to_thread(
                self.system.wait_for_replacement, victim, self.system.web_workers
            )
            record["worker_restarted_s"] = round(time.monotonic() - injected, 2)

    def flush_redis(self) -> dict:
        client = self.system.redis()
        try:
            keys = client.dbsize()
            client.flushdb()
        finally:
            client.close()
        return {"keys_flushed": keys}

    def terminate_postgres(self) -> dict:
        with self.system.postgres() as connection:
            terminated = connection.execute(
                "select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity"
                " where datname = current_database() and pid <> pg_backend_pid()"
            ).fetchone()[0]
        return {"connections_terminated": terminated}

    def _signal_worker(self, signum: int) -> dict:
        workers = self.system.web_worker_pids()
        victim = workers[len(workers) // 2]
        os.kill(victim, signum)
        if signum == signal.SIGKILL:
            self.kills.append(time.monotonic())
        return {"worker_pid": victim}

    def sigterm_worker(self) -> dict:
        return self._signal_worker(signal.SIGTERM)

    def sigkill_worker(self) -> dict:
        return self._signal_worker(signal.SIGKILL)

    def in_kill_window(self, ended: float) -> bool:
        return any(
            kill - KILL_WINDOW_BEFORE_SECONDS <= ended <= kill + KILL_WINDOW_AFTER_SECONDS
            for kill in self.kills
        )


# ---------------------------------------------------------------------- the checks


def _settled_rows(system: System, prefix: str, timeout: float = 30) -> tuple[dict, dict]:
    """Rows per request id in both fact tables, once their counts stopped changing."""
    last, stable_since, deadline = None, time.monotonic(), time.monotonic() + timeout
    with system.postgres() as connection:
        while True:
            counts = connection.execute(
                "select (select count(*) from usage_records), (select count(*) from ops_error_logs)"
            ).fetchone()
            if counts != last:
                last, stable_since = counts, time.monotonic()
            elif time.monotonic() - stable_since > 2 or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        usage = dict(
            connection.execute(
                "select request_id, count(*) from usage_records where request_id like %s"
                " group by request_id",
                [prefix + "%"],
            ).fetchall()
        )
        ops = dict(
            connection.execute(
                "select request_id, count(*) from ops_error_logs where request_id like %s"
                " group by request_id",
                [prefix + "%"],
            ).fetchall()
        )
    return usage, ops


def _buckets_match(system: System) -> tuple[tuple, tuple]:
    with system.postgres() as connection:
        facts = connection.execute(
            "select (select count(*) from usage_records), (select count(*) from ops_error_logs)"
        ).fetchone()
        buckets = connection.execute(
            "select coalesce(sum(success_count), 0), coalesce(sum(error_count), 0)"
            " from request_time_buckets"
        ).fetchone()
    return tuple(facts), tuple(int(value) for value in buckets)


def _slot_members(system: System) -> int:
    client = system.redis()
    try:
        keys = list(client.scan_iter(f"{system.key_prefix}scheduler:slots:*"))
        return sum(client.zcard(key) for key in keys)
    finally:
        client.close()


def _cap_probe(system: System, scanner: Scanner) -> dict:
    """After the faults: twice the pool's capacity of slow streams at once. Every request must
    be served (no wedged slot keeps capacity away) and no account may carry more streams at
    once than the cap (the flushed slots did not leave the cap broken)."""
    system.codex.max_in_flight.clear()
    previous = system.codex.default_reply
    system.codex.default_reply = replace(previous, delta_delay=0.02)
    capacity = system.cap * system.accounts
    probe = Load(system, scanner, total=capacity * 4, concurrency=capacity * 2)
    try:
        asyncio.run(probe.run(faults=False, first_index=900_000))
    finally:
        system.codex.default_reply = previous
    return {
        "requests": len(probe.outcomes),
        "served": sum(1 for outcome in probe.outcomes if outcome.kind == "ok"),
        "most_streams_on_one_account": max(system.codex.max_in_flight.values(), default=0),
    }


EXPECTED_ROWS = {"ok": (1, 0), "error": (0, 1)}  # (usage_records, ops_error_logs)


def judge(load: Load, usage: dict, ops: dict, dispatched: set) -> dict:
    """What each request left against what it must leave (the table in the module doc)."""
    verdicts: Counter = Counter()
    examples: list[str] = []
    for outcome in load.outcomes:
        in_usage, in_ops = usage.get(outcome.request_id, 0), ops.get(outcome.request_id, 0)
        verdicts["in_both"] += bool(in_usage and in_ops)
        verdicts["duplicates"] += in_usage + in_ops > 1
        if in_usage + in_ops == 0:
            if load.in_kill_window(outcome.ended):
                verdicts["lost_in_kill_window"] += 1
                verdicts[f"lost_in_kill_window_{outcome.kind}"] += 1
                if outcome.kind != "cut":
                    kill = min(load.kills, key=lambda at: abs(at - outcome.ended))
                    before = kill - outcome.ended
                    verdicts["oldest_lost_ms"] = max(verdicts["oldest_lost_ms"], before * 1000)
            elif (
                outcome.kind == "cut"
                and outcome.status == 0
                and outcome.request_id not in dispatched
            ):
                # Closed by the server before any answer (a draining worker closes its idle
                # keep-alive connections) and never sent upstream: nothing happened to record.
                verdicts["never_reached"] += 1
            else:
                verdicts["lost"] += 1
                examples.append(f"{outcome.request_id} {outcome.kind} ({outcome.code}): no row")
        elif outcome.kind in EXPECTED_ROWS and (in_usage, in_ops) != EXPECTED_ROWS[outcome.kind]:
            verdicts["wrong"] += 1
            examples.append(
                f"{outcome.request_id} {outcome.kind} {outcome.status} {outcome.code}:"
                f" {in_usage} usage + {in_ops} ops rows"
            )
    verdicts["examples"] = examples
    return verdicts


def run(system: System, scanner: Scanner, *, total: int, concurrency: int) -> Part:
    part = Part("proxy under load and faults")
    load = Load(system, scanner, total=total, concurrency=concurrency)
    elapsed = asyncio.run(load.run())
    usage, ops = _settled_rows(system, f"drill-{os.getpid()}-")
    kinds = Counter(outcome.kind for outcome in load.outcomes)
    statuses = Counter(outcome.status for outcome in load.outcomes if outcome.status >= 500)
    codes = Counter(outcome.code for outcome in load.outcomes if outcome.kind != "ok")

    dispatched = {
        request.header("x-client-request-id") for request in system.codex.responses_requests()
    }
    verdicts = judge(load, usage, ops, dispatched)
    issued_ids = {outcome.request_id for outcome in load.outcomes}
    strangers = len((set(usage) | set(ops)) - issued_ids)
    facts, buckets = _buckets_match(system)
    slots_after = _slot_members(system)
    slots_clear_s = None
    started = time.monotonic()
    while time.monotonic() - started < 30:
        if _slot_members(system) == 0:
            slots_clear_s = time.monotonic() - started
            break
        time.sleep(0.5)
    probe = _cap_probe(system, scanner)

    part.figure("requests", len(load.outcomes))
    part.figure("concurrency", concurrency)
    part.figure("seconds", elapsed)
    part.figure("req/s", len(load.outcomes) / elapsed if elapsed else 0.0)
    part.figure(
        "completed / error answers / cut", f"{kinds['ok']} / {kinds['error']} / {kinds['cut']}"
    )
    part.figure("5xx answers by status", dict(statuses) or 0)
    part.figure("failure codes", dict(codes) or "-")
    part.figure("faults injected", len(load.faults))
    for fault in load.faults:
        detail = {k: v for k, v in fault.items() if k not in ("fault", "healthz_recovery_s")}
        part.figure(
            f"  {fault['fault']} @{fault['at_request']}",
            f"/healthz back in {fault['healthz_recovery_s']:.2f} s {detail}",
        )
    part.figure(
        "no row: lost in SIGKILL's window (answered / cut)",
        f"{verdicts['lost_in_kill_window']} ({verdicts['lost_in_kill_window_ok']}"
        f" + {verdicts['lost_in_kill_window_error']} / {verdicts['lost_in_kill_window_cut']})",
    )
    part.figure("  the oldest answered one ended before the kill (ms)", verdicts["oldest_lost_ms"])
    part.figure("no row: never reached the proxy", verdicts["never_reached"])
    part.figure("no row: lost outside SIGKILL's window", verdicts["lost"])
    part.figure("wrong rows (kind or count)", verdicts["wrong"])
    part.figure("duplicate rows", verdicts["duplicates"])
    part.figure("in both tables", verdicts["in_both"])
    part.figure("rows of unknown request ids", strangers)
    part.figure("facts (usage, ops)", facts)
    part.figure("buckets (success, error)", buckets)
    part.figure("slot members right after the load", slots_after)
    part.figure("slots all free after (s)", slots_clear_s)
    part.figure(
        "cap probe: served / sent, most on one account (cap)",
        f"{probe['served']} / {probe['requests']}, {probe['most_streams_on_one_account']}"
        f" ({system.cap})",
    )
    part.require(verdicts["lost"] == 0, "no row lost outside SIGKILL's window")
    part.require(verdicts["wrong"] == 0, "each answered request has exactly its one row")
    part.require(verdicts["duplicates"] == 0, "no request has two rows")
    part.require(verdicts["in_both"] == 0, "no request in both usage_records and ops_error_logs")
    part.require(strangers == 0, "no row for a request id the drill never sent")
    part.require(facts == buckets, "request_time_buckets add up to the facts")
    part.require(slots_clear_s is not None, "no concurrency slot stays wedged")
    part.require(probe["served"] == probe["requests"], "full concurrency is usable after faults")
    part.require(
        probe["most_streams_on_one_account"] <= system.cap, "the cap holds after the flushes"
    )
    part.require(statuses.get(500, 0) == 0, "no 500 (an unexpected server error)")
    part.require(kinds["ok"] > len(load.outcomes) * 0.8, "the pool keeps serving (80%+ complete)")
    for example in verdicts["examples"][:10]:
        part.note(example)
    return part
