"""Which account a conversation belongs to, and how a ``previous_response_id`` is honoured
(spec §5.2–§5.3, seed 004 §4B.3).

Before the first attempt Redis is asked what the request needs: with a previous id, that
response's record (one script call); without one, the newest record of the request's local
conversation whose variant hash matches, inside the scheduler's order-and-acquire script (no
round trip of its own). The record's account is then preferred (moved to the front of the
candidate order) or, for a managed previous id, it is the owner: the only account tried first.

What happens after a failure on the owner is ``after_owner_failure``: one same-account retry
with the full replay on a history error or an unavailable continuation, the replay to another
account on a rotatable failure — both only when the chain can be rebuilt — else 400
``previous_response_unavailable`` (or 503 ``continuation_connection_busy``). An unknown
("external") previous id gets exactly one account, untouched, and the upstream's answer.

Every record belongs to the client key whose request produced it (``clientKeyId``, issue 34).
A record of another key — or of none: written before the field existed — is never honoured: its
id is answered as one that never existed (``proxy.dispatch.unknown_previous``: no upstream
call, no replay, no routing hint), its turn state reaches nobody else's request, and its
replay node no other key's history. The conversation's preference (the scheduler's script)
only looks at the key's own records, in the key's own conversation index.

Redis may lose a record at any time; ownership does not go with it: for a previous id Redis
does not know (or when its lookup fails) the durable ledger is asked
(``proxy.dispatch.ledger_ownership``).

Redis failures degrade to normal scheduling; they are logged without keys or values.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from redis.commands.core import AsyncScript

from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.dispatch.ledger_ownership import ledger_verdict
from proxy.domain.conversation import stable_key
from proxy.domain.dispatch_types import DispatchReport, DispatchRequest, StreamEnd
from proxy.domain.failures import AttemptFailure, FailureKind, history_error_code
from proxy.domain.replay import MAX_DEPTH, reconstruct, replay_body
from proxy.domain.upstream_request import ClientIdentity
from proxy.ledger.affinity import AffinityWrite, wait_if_pending
from proxy.loop_resources import async_redis

logger = logging.getLogger(__name__)

# A response id longer than this is nobody's (it would only make a long Redis key): an unknown
# previous id, and no record for such a response.
MAX_RESPONSE_ID_LENGTH = 256
# KEYS[1]: the record of the previous response. Returns it, or nothing (whose key it is, is
# checked by the caller: another key's is answered as never existing).
# The record comes back without its replay turns (up to 2 MiB the request path never needs:
# the node's parentResponseId/depth/totalBytes are kept). Records are written by
# proxy.runtime_state.affinity with default json separators, the replay node last and its
# turns last in it; every field before them is a string, number or list of strings, whose
# quotes JSON escapes, so the first unescaped ', "replay": ' is the record's own. A record in
# another shape is returned whole. (A conversation's preference, spec §5.2, is looked up by the
# scheduler's order-and-acquire script: proxy.scheduling.scheduler.)
_LOOKUP = lua_script("proxy", "continuity_lookup")
# No client of its own: each call passes one (redis-py's stubs want one here all the same).
_LOOKUP_SCRIPT = AsyncScript(None, _LOOKUP.encode())  # type: ignore[arg-type]

# KEYS[1]: the record of the newest response of a chain. ARGV: record key prefix, max depth.
# Walks the parent links inside Redis (same layout as above: the node's parentResponseId is
# its first field) and returns {response id, record JSON, …} from the child to the root (or
# as far as the records go): only the chain, not the conversation's other responses.
_CHAIN = lua_script("proxy", "continuity_chain")
# No client of its own: each call passes one (redis-py's stubs want one here all the same).
_CHAIN_SCRIPT = AsyncScript(None, _CHAIN.encode())  # type: ignore[arg-type]


def instructions_hash(body: dict[str, Any]) -> str:
    instructions = body.get("instructions")
    return hashlib.sha256(
        (instructions if isinstance(instructions, str) else "").encode()
    ).hexdigest()


def variant_hash(body: dict[str, Any], client: ClientIdentity) -> str:
    """First 12 hex of SHA-256(instructions \\0 tools-json [\\0 variant identity]); the
    variant identity is ``window:<window id>`` and/or ``anchor:<stable key>`` (the latter only
    when the client sent a prompt_cache_key)."""
    instructions = body.get("instructions")
    parts = [
        instructions if isinstance(instructions, str) else "",
        json.dumps(body.get("tools") or [], ensure_ascii=False, separators=(",", ":")),
    ]
    if client.values.get("window-id"):
        parts.append(f"window:{client.values['window-id']}")
    if client.values.get("prompt-cache-key"):
        parts.append(f"anchor:{stable_key(body)}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


@dataclass
class Continuity:
    """What affinity says about one request; built by ``look_up`` before the first attempt."""

    conversation_id: str  # the request's local conversation id (lc_…)
    variant_hash: str
    previous_response_id: str | None = None
    # The previous response's record (managed), or the conversation's newest matching one;
    # its replay node without the turns (parentResponseId, depth, totalBytes, clientKeyId).
    # Only ever the request's own key's record.
    record: dict[str, Any] | None = None
    # The request's client key: the only key whose records and nodes this request may use.
    client_key_id: str | None = None
    # The previous id has a record (or a ledger row), but not of this key (or of no key): the
    # request is answered as if the id never existed (``proxy.dispatch.unknown_previous``).
    foreign: bool = False
    # No record, but this key's own ledger row of the id: the account that produced it, where
    # the external id's one attempt goes first.
    ledger_account_id: str | None = None
    # Rebuilt lazily (one Redis script call), only when a recovery needs it.
    _history: list[Any] | None = field(default=None, repr=False)
    _history_read: bool = field(default=False, repr=False)

    @property
    def managed(self) -> bool:
        return self.previous_response_id is not None and self.record is not None

    @property
    def external(self) -> bool:
        return self.previous_response_id is not None and self.record is None and not self.foreign

    @property
    def preferred_account_id(self) -> str | None:
        return self.record.get("accountId") if self.record else None

    @property
    def record_conversation_id(self) -> str:
        """The conversation a new record joins: the owner's for a continuation."""
        record = self.record if self.managed else None
        owners: str | None = record.get("conversationId") if record is not None else None
        return owners or self.conversation_id

    @property
    def stored_turn_state(self) -> str | None:
        """The turn state the previous response left — only ever this key's own record's."""
        record = self.record if self.managed else None
        if record is None or not owned_by(record, self.client_key_id):
            return None
        value = record.get("turnState")
        return value if isinstance(value, str) and value else None

    async def history(self) -> list[Any] | None:
        """The managed chain's full history (oldest first), or None when it cannot be rebuilt."""
        if not self._history_read:
            self._history_read = True
            assert self.previous_response_id is not None  # asked of a managed continuation only
            self._history = await _read_history(self.previous_response_id, self.client_key_id)
        return self._history


def owned_by(record: object, client_key_id: str | None) -> bool:
    """Whether ``record`` is ``client_key_id``'s (a record naming no key is nobody's)."""
    return (
        isinstance(record, dict)
        and bool(client_key_id)
        and isinstance(record.get("clientKeyId"), str)
        and record["clientKeyId"] == client_key_id
    )


async def look_up(
    *,
    previous_response_id: str,
    conversation_id: str,
    variant: str,
    client_key_id: str | None,
) -> Continuity:
    """The record of ``previous_response_id`` when it is ``client_key_id``'s (managed), a
    record or ledger row of another key or of none (foreign), or nothing (external, with this
    key's ledger account when it has a row): one Redis round trip, and one ledger query when
    Redis knows nothing (its failure logged)."""
    continuity = Continuity(
        conversation_id=conversation_id,
        variant_hash=variant,
        previous_response_id=previous_response_id,
        client_key_id=client_key_id,
    )
    if len(previous_response_id) > MAX_RESPONSE_ID_LENGTH:
        return continuity
    # A record this process is still writing (the client was quicker than the writer).
    await wait_if_pending(previous_response_id)
    try:
        redis = await async_redis.get()
        found = await _LOOKUP_SCRIPT(
            keys=[redis_keys.affinity_response(previous_response_id)], args=[], client=redis
        )
        if found:
            record = json.loads(found)
            if owned_by(record, client_key_id):
                continuity.record = record
            else:
                # Dropped here: nothing of another key's record goes further.
                continuity.foreign = True
    except Exception as error:
        logger.warning("affinity lookup failed (%s); asking the ledger", type(error).__name__)
    if continuity.record is None and not continuity.foreign:
        verdict = await ledger_verdict(previous_response_id, client_key_id=client_key_id)
        continuity.foreign, continuity.ledger_account_id = verdict.foreign, verdict.account_id
    return continuity


async def _read_history(response_id: str, client_key_id: str | None) -> list[Any] | None:
    """One script call: the records of the chain, child to root; then the history (only when
    every record and node of it is ``client_key_id``'s)."""
    try:
        redis = await async_redis.get()
        found = await _CHAIN_SCRIPT(
            keys=[redis_keys.affinity_response(response_id)],
            args=[redis_keys.affinity_response(""), MAX_DEPTH],
            client=redis,
        )
    except Exception as error:
        logger.warning("affinity history read failed (%s)", type(error).__name__)
        return None
    records = {}
    for index in range(0, len(found), 2):
        member = found[index].decode() if isinstance(found[index], bytes) else found[index]
        try:
            records[member] = json.loads(found[index + 1])
        except ValueError:
            return None
    return reconstruct(response_id, records, client_key_id=client_key_id)


# ----------------------------------------------------------------------------- decisions


class Next(enum.Enum):
    """What a managed continuation does after its owner failed (or cannot be used)."""

    RETRY_SAME_WITH_REPLAY = "retry_same_with_replay"
    ROTATE_WITH_REPLAY = "rotate_with_replay"
    GIVE_UP = "give_up"  # the failure's own client error (returned as-is)
    UNAVAILABLE = "previous_response_unavailable"
    BUSY = "continuation_connection_busy"


def is_recoverable(failure: AttemptFailure) -> bool:
    """Whether the failure is one a replay may recover (so the history is worth reading)."""
    return (
        failure.kind == FailureKind.CONTINUATION_UNAVAILABLE
        or history_error_code(failure) is not None
        or failure.rotates
    )


def after_owner_failure(
    failure: AttemptFailure | None, *, has_replay: bool, same_account_replay_spent: bool
) -> Next:
    """Spec §5.3 for a managed previous id. ``failure`` None: the owner cannot be used at all
    (no longer eligible, or no slot in time)."""
    if failure is None:
        return Next.ROTATE_WITH_REPLAY if has_replay else Next.UNAVAILABLE
    if failure.kind == FailureKind.CONTINUATION_UNAVAILABLE:
        if has_replay and not same_account_replay_spent:
            return Next.RETRY_SAME_WITH_REPLAY
        if failure.code == "connection_busy":
            return Next.BUSY
        return Next.UNAVAILABLE
    if history_error_code(failure) is not None:
        if has_replay and not same_account_replay_spent:
            return Next.RETRY_SAME_WITH_REPLAY
        return Next.UNAVAILABLE if not has_replay else Next.GIVE_UP
    if failure.rotates and has_replay:
        return Next.ROTATE_WITH_REPLAY
    return Next.GIVE_UP


# ----------------------------------------------------------------------------- the record


def _function_call_ids(output: list[Any]) -> list[str]:
    return [
        item["call_id"]
        for item in output
        if isinstance(item, dict)
        and item.get("type") == "function_call"
        and isinstance(item.get("call_id"), str)
    ]


def affinity_write(report: DispatchReport, continuity: Continuity | None) -> AffinityWrite | None:
    """The record a finished dispatch leaves (spec §5.1), or None when it did not complete a
    response (failed, cut, cancelled, compact)."""
    served = report.served
    if continuity is None or served is None or report.end != StreamEnd():
        return None
    response = served.response_object
    if response is None and served.progress is not None:
        if served.progress.terminal_event != "response.completed":
            return None
        terminal = served.progress.terminal or {}
        response = terminal.get("response")
    if not isinstance(response, dict) or response.get("status", "completed") != "completed":
        return None
    response_id = response.get("id")
    if not isinstance(response_id, str) or not 0 < len(response_id) <= MAX_RESPONSE_ID_LENGTH:
        return None
    request = report.request
    record = continuity.record if continuity.managed else None
    output = response["output"] if isinstance(response.get("output"), list) else []
    usage = response["usage"] if isinstance(response.get("usage"), dict) else {}
    input_tokens = usage.get("input_tokens")
    return AffinityWrite(
        response_id=response_id,
        account_id=served.account.id,
        conversation_id=continuity.record_conversation_id,
        turn_state=served.upstream_headers.get("x-codex-turn-state")
        or request.client_identity.context.get("x-codex-turn-state")
        or continuity.stored_turn_state,
        instructions_hash=instructions_hash(request.body),
        input_tokens=input_tokens if isinstance(input_tokens, int) else None,
        function_call_ids=_function_call_ids(output),
        variant_hash=continuity.variant_hash,
        continuation_scope="persisted" if request.body.get("store") is True else "connection_local",
        created_at=timezone.now(),
        turn_input=request.body.get("input"),
        turn_output=output,
        previous_response_id=continuity.previous_response_id if continuity.managed else None,
        parent_replay=record.get("replay") if record is not None else None,
        external_previous=continuity.external,
        client_body_bytes=request.body_bytes,
        client_key_id=request.client_api_key_id,
    )


# ----------------------------------------------------------------------------- what is sent


def owner_request(request: DispatchRequest, continuity: Continuity) -> DispatchRequest:
    """The request as the owner gets it: the stored turn state when the client sent none."""
    identity = request.client_identity
    stored = continuity.stored_turn_state
    if stored is None or "x-codex-turn-state" in identity.context:
        return request
    with_state = dataclasses.replace(
        identity, context={"x-codex-turn-state": stored, **identity.context}
    )
    return dataclasses.replace(request, client_identity=with_state)


async def replay_request(request: DispatchRequest, continuity: Continuity) -> DispatchRequest:
    """The full replay (spec §5.3): the rebuilt history plus this turn's input, sanitized; no
    previous id, no turn state."""
    history = await continuity.history()
    identity = request.client_identity
    without_state = dataclasses.replace(
        identity,
        context={k: v for k, v in identity.context.items() if k != "x-codex-turn-state"},
    )
    return dataclasses.replace(
        request, body=replay_body(request.body, history or []), client_identity=without_state
    )
