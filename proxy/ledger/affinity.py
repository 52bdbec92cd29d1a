"""The Redis writes that follow a response, off the client's critical path: the affinity record
of every completed response (seed 004 §4B.3, spec §5.1), the release of its concurrency slot,
its key policy's settlement.

A finished dispatch hands one ``AffinityWrite`` (and its script calls) to this loop's writer
and returns; the writer builds the replay node (sanitizing and measuring the turn; a large turn
in a worker thread) and sends what accumulated in one round trip (a pipeline of script calls,
``proxy.runtime_state.script_calls``) on the loop's async Redis client. A Redis failure is
logged — without keys, ids or values — and the record is simply missing (affinity degrades to
normal scheduling), a slot or in-flight member is reclaimed by its TTL.

The one thing the request path asks of the writer: whether a response id is still waiting to
be written in this process (``wait_if_pending``), so a client that sends the next turn of a
chain the moment it has the previous answer does not find it missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async

from proxy.domain.replay import build_node
from proxy.loop_resources import PerLoop, async_redis
from proxy.runtime_state.affinity import PreparedRecord, record_json, records_call
from proxy.runtime_state.script_calls import ScriptCall, execute_calls

logger = logging.getLogger(__name__)
# How long a continuation waits for its previous response's record still being written here.
PENDING_WAIT_SECONDS = 2.0
# Records per script call, and the JSON one call may carry (a node is at most 2 MiB).
MAX_BATCH_RECORDS = 64
MAX_CALL_BYTES = 8 * 1024 * 1024
# Other script calls (releases, settlements) per round trip.
MAX_BATCH_CALLS = 256
# A turn whose client body is larger than this has its node built off the event loop.
INLINE_BUILD_BYTES = 64 * 1024


@dataclass(frozen=True)
class AffinityWrite:
    """What one completed response leaves in Redis (the record's fields, before the node)."""

    response_id: str
    account_id: str
    conversation_id: str
    turn_state: str | None
    instructions_hash: str
    input_tokens: int | None
    function_call_ids: list[str]
    variant_hash: str
    continuation_scope: str  # "persisted" (store:true) or "connection_local"
    created_at: datetime
    turn_input: Any
    turn_output: list
    # The previous response of a managed continuation and its node; an unknown (external)
    # previous id gets no node at all.
    previous_response_id: str | None = None
    parent_replay: dict | None = None
    external_previous: bool = False
    # The size of the client's request body: how much sanitizing the node will take.
    client_body_bytes: int = 0
    # The client key whose request this was: the record and its node are that key's alone
    # (None: nobody's — no request may continue or replay it).
    client_key_id: str | None = None

    def fields(self) -> dict[str, Any]:
        replay = None
        if not self.external_previous:
            replay = build_node(
                parent_response_id=self.previous_response_id,
                parent_replay=self.parent_replay,
                turn_input=self.turn_input,
                turn_output=self.turn_output,
                client_key_id=self.client_key_id,
            )
        return {
            "turnState": self.turn_state,
            "instructionsHash": self.instructions_hash,
            "inputTokens": self.input_tokens,
            "functionCallIds": self.function_call_ids,
            "variantHash": self.variant_hash,
            "continuationScope": self.continuation_scope,
            "replay": replay,
        }


def prepare(write: AffinityWrite) -> PreparedRecord | None:
    """The record of ``write`` ready to send (its replay node built and the JSON encoded), or
    None when building it failed (logged; the record is then missing)."""
    try:
        raw = record_json(
            account_id=write.account_id,
            conversation_id=write.conversation_id,
            created_at=write.created_at,
            fields=write.fields(),
            client_key_id=write.client_key_id,
        )
    except Exception as error:  # a bug in the node's building: the answer was sent already
        logger.warning("affinity record not built (%s)", type(error).__name__)
        return None
    return PreparedRecord(
        response_id=write.response_id,
        account_id=write.account_id,
        conversation_id=write.conversation_id,
        created_at=write.created_at,
        raw=raw,
    )


def _prepare_all(writes: list[AffinityWrite]) -> list[PreparedRecord]:
    return [record for write in writes if (record := prepare(write)) is not None]


def _batches(records: list[PreparedRecord]) -> list[list[PreparedRecord]]:
    """``records`` split so that no script call carries more than MAX_CALL_BYTES of JSON."""
    batches: list[list[PreparedRecord]] = [[]]
    size = 0
    for record in records:
        if batches[-1] and size + len(record.raw) > MAX_CALL_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(record)
        size += len(record.raw)
    return batches


async def records_calls(writes: list[AffinityWrite]) -> list[ScriptCall]:
    """The script calls that write the records of ``writes`` (one per MAX_CALL_BYTES of JSON);
    a record whose node could not be built is left out (logged)."""
    if any(write.client_body_bytes > INLINE_BUILD_BYTES for write in writes):
        # Sanitizing and encoding a large turn is CPU work: off the event loop.
        records = await sync_to_async(_prepare_all, thread_sensitive=False)(writes)
    else:
        records = _prepare_all(writes)
    if not records:
        return []
    return [records_call(batch) for batch in _batches(records)]


async def write_batch(writes: list[AffinityWrite], calls: Sequence[ScriptCall] = ()) -> None:
    """Write the records of ``writes`` and make ``calls``, all in one Redis round trip. A
    failure is logged (without keys, ids or values): a record is then missing, a slot or a
    key's in-flight member is left to its TTL."""
    calls = [*calls, *await records_calls(writes)]
    if not calls:
        return
    try:
        client = await async_redis.get()
        replies = await execute_calls(client, calls)
    except Exception as error:
        replies = [error] * len(calls)
    failed = Counter(
        (call.what, type(reply).__name__)
        for call, reply in zip(calls, replies, strict=True)
        if isinstance(reply, Exception)
    )
    for (what, error_name), count in failed.items():
        logger.warning("%s not written (%s) x%d", what, error_name, count)


@dataclass
class AffinityWriter:
    """Writes what finished dispatches leave for Redis, on this event loop: affinity records,
    slot releases, key settlements. Whatever accumulated while the previous round trip was in
    flight goes in the next one (one round trip for many requests under load, an immediate
    write when idle)."""

    _pending: deque[AffinityWrite] = field(default_factory=deque)
    _calls: deque[ScriptCall] = field(default_factory=deque)
    _waiting_ids: set[str] = field(default_factory=set)
    _task: asyncio.Task | None = None

    def submit(self, write: AffinityWrite) -> None:
        self._pending.append(write)
        self._waiting_ids.add(write.response_id)
        self._start()

    def submit_call(self, call: ScriptCall) -> None:
        self._calls.append(call)
        self._start()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def is_pending(self, response_id: str) -> bool:
        return response_id in self._waiting_ids

    async def _run(self) -> None:
        while self._pending or self._calls:
            count = min(MAX_BATCH_RECORDS, len(self._pending))
            writes = [self._pending.popleft() for _ in range(count)]
            calls = [self._calls.popleft() for _ in range(min(MAX_BATCH_CALLS, len(self._calls)))]
            try:
                await write_batch(writes, calls)
            except Exception:  # a bug, not Redis: never let it stop the writer
                logger.exception("affinity writer failed unexpectedly")
            finally:
                self._waiting_ids.difference_update(write.response_id for write in writes)

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


_writers: PerLoop[AffinityWriter] = PerLoop(AffinityWriter)


def submit(write: AffinityWrite) -> None:
    """Queue ``write``; the caller goes on at once."""
    _writers.get_or_create().submit(write)


def submit_call(call: ScriptCall) -> None:
    """Queue a script call that must follow a response (a slot release, a settlement); it goes
    in the writer's next round trip."""
    _writers.get_or_create().submit_call(call)


async def wait_if_pending(response_id: str) -> None:
    """Wait (bounded) while this process still has ``response_id``'s record to write."""
    writer = _writers.get_or_create()
    if writer.is_pending(response_id):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.flush(), PENDING_WAIT_SECONDS)


async def await_pending_writes() -> None:
    """Wait until every queued record and call is written (tests, graceful shutdown)."""
    await _writers.get_or_create().flush()
