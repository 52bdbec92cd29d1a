"""Session affinity v2 (seed 004 §4B.3): which account served a response, and its conversation.

``resp:<id>`` holds one complete JSON record (EXAT createdAt + TTL); two ZSETs index it by
conversation and by account (score = createdAt in epoch ms). Writers maintain the indexes;
readers tolerate dangling members (record already expired) and remove them when they meet them.
No copy of this lives in process memory.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from redis.commands.core import AsyncScript

from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.runtime_state import redis_client
from proxy.runtime_state.script_calls import ScriptCall

AFFINITY_TTL_SECONDS = 4 * 3600


@dataclass(frozen=True)
class AffinityEntry:
    response_id: str
    record: dict[str, Any]

    @property
    def account_id(self) -> str:
        return self.record["accountId"]


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def record_json(
    *,
    account_id: str,
    conversation_id: str | None,
    created_at: datetime,
    fields: dict[str, Any] | None = None,
    client_key_id: str | None = None,
) -> str:
    """The stored JSON of one record (seed §4B.3 fields, ``fields`` carrying the rest: turnState,
    instructionsHash, inputTokens, functionCallIds, variantHash, continuationScope, replay).

    ``clientKeyId`` (our extension of the seed's record, issue 34) is the client key whose
    request produced the response: only that key's requests may continue it, be steered by it
    or replay it. A record without one (written before it existed) is nobody's.

    The replay node (up to 2 MiB) comes last, so that the request path's lookup script can
    match the variant and return the record without it by position, without decoding it
    (proxy.dispatch.continuity); default json separators."""
    fields = dict(fields or {})
    replay = fields.pop("replay", None)
    record = {
        "accountId": account_id,
        "clientKeyId": client_key_id,
        "conversationId": conversation_id,
        **fields,
        "createdAt": created_at.isoformat(),
        "replay": replay,
    }
    return json.dumps(record)


def affinity_record(
    *,
    response_id: str,
    account_id: str,
    conversation_id: str | None,
    created_at: datetime,
    fields: dict[str, Any] | None = None,
    ttl_seconds: int = AFFINITY_TTL_SECONDS,
    client_key_id: str | None = None,
) -> None:
    """Record that ``account_id`` produced ``response_id`` for ``client_key_id`` (one MULTI
    transaction; the request path writes its records in batches, ``proxy.ledger.affinity``).

    Index members older than the TTL are pruned on the way.
    """
    raw = record_json(
        account_id=account_id,
        conversation_id=conversation_id,
        created_at=created_at,
        fields=fields,
        client_key_id=client_key_id,
    )
    score = _epoch_ms(created_at)
    oldest_kept = score - ttl_seconds * 1000
    pipeline = redis_client().pipeline(transaction=True)
    pipeline.set(
        redis_keys.affinity_response(response_id),
        raw,
        exat=int(created_at.timestamp()) + ttl_seconds,
    )
    index_keys = [redis_keys.affinity_account(account_id)]
    if conversation_id:
        index_keys.append(redis_keys.affinity_conversation(conversation_id))
    for index_key in index_keys:
        pipeline.zadd(index_key, {response_id: score})
        pipeline.expire(index_key, ttl_seconds)
        pipeline.zremrangebyscore(index_key, "-inf", f"({oldest_kept}")
    pipeline.execute()


@dataclass(frozen=True)
class PreparedRecord:
    """One record ready for ``write_records``: its JSON and where it is indexed."""

    response_id: str
    account_id: str
    conversation_id: str | None
    created_at: datetime
    raw: str


# Many records in one call, each exactly as ``affinity_record`` writes it: the record with
# EXAT, then in each index the member, the index's EXPIRE and the pruning of members older
# than the TTL. KEYS per record: its record key, the account index, the conversation index
# (when it has one). ARGV[1] the TTL in seconds, then per record: response id, JSON, EXAT,
# score (createdAt ms), oldest score kept, 1/0 whether it has a conversation index.
_WRITE_RECORDS = lua_script("proxy", "affinity_write_records")
# No client of its own: each call passes one (redis-py's stubs want one here all the same).
_WRITE_RECORDS_SCRIPT = AsyncScript(None, _WRITE_RECORDS.encode())  # type: ignore[arg-type]


def records_call(
    records: list[PreparedRecord], *, ttl_seconds: int = AFFINITY_TTL_SECONDS
) -> ScriptCall:
    """The one script call that writes ``records`` with their indexes (atomic)."""
    keys: list[str] = []
    args: list[Any] = [ttl_seconds]
    for record in records:
        score = _epoch_ms(record.created_at)
        keys.append(redis_keys.affinity_response(record.response_id))
        keys.append(redis_keys.affinity_account(record.account_id))
        if record.conversation_id:
            keys.append(redis_keys.affinity_conversation(record.conversation_id))
        args += [
            record.response_id,
            record.raw,
            int(record.created_at.timestamp()) + ttl_seconds,
            score,
            score - ttl_seconds * 1000,
            "1" if record.conversation_id else "0",
        ]
    return ScriptCall(_WRITE_RECORDS_SCRIPT, keys, args, what="affinity record")


def affinity_get(response_id: str) -> dict[str, Any] | None:
    """The record of ``response_id``, or None when unknown or expired."""
    raw = redis_client().get(redis_keys.affinity_response(response_id))
    return None if raw is None else json.loads(raw)


def affinity_latest_for_conversation(
    conversation_id: str,
    *,
    now: datetime,
    variant_hash: str | None = None,
    max_age_seconds: int | None = None,
) -> AffinityEntry | None:
    """The newest live record of the conversation matching ``variant_hash`` and age, if any.

    Dangling index members met on the way are removed (lazy clean-up, seed §2.9 rule 4).
    """
    client = redis_client()
    index_key = redis_keys.affinity_conversation(conversation_id)
    indexed = cast(list[bytes], client.zrevrange(index_key, 0, -1))  # not decoded: bytes
    members = [member.decode() for member in indexed]
    if not members:
        return None
    values = client.mget([redis_keys.affinity_response(member) for member in members])
    dangling = []
    found = None
    for response_id, raw in zip(members, values, strict=True):
        if raw is None:
            dangling.append(response_id)
            continue
        record = json.loads(raw)
        if variant_hash is not None and record.get("variantHash") != variant_hash:
            continue
        created_at = datetime.fromisoformat(record["createdAt"])
        if max_age_seconds is not None and (now - created_at).total_seconds() > max_age_seconds:
            continue
        found = AffinityEntry(response_id=response_id, record=record)
        break
    if dangling:
        client.zrem(index_key, *dangling)
    return found


def affinity_forget(response_id: str) -> bool:
    """Delete one record and its two index members (one MULTI); return whether it existed."""
    record = affinity_get(response_id)
    if record is None:
        return False
    pipeline = redis_client().pipeline(transaction=True)
    pipeline.delete(redis_keys.affinity_response(response_id))
    pipeline.zrem(redis_keys.affinity_account(record["accountId"]), response_id)
    if record.get("conversationId"):
        pipeline.zrem(redis_keys.affinity_conversation(record["conversationId"]), response_id)
    pipeline.execute()
    return True


def affinity_purge_account(account_id: str) -> int:
    """Remove everything recorded for a deleted account; return how many records it had.

    Three round trips whatever the count: ZRANGE the account index, MGET the records (to learn
    their conversations), then one atomic pipeline deleting the records, their conversation
    members and the account index.
    """
    client = redis_client()
    account_key = redis_keys.affinity_account(account_id)
    indexed = cast(list[bytes], client.zrange(account_key, 0, -1))  # not decoded: bytes
    members = [member.decode() for member in indexed]
    if not members:
        client.delete(account_key)
        return 0
    values = client.mget([redis_keys.affinity_response(member) for member in members])
    by_conversation: dict[str, list[str]] = defaultdict(list)
    for response_id, raw in zip(members, values, strict=True):
        if raw is not None:
            conversation_id = json.loads(raw).get("conversationId")
            if conversation_id:
                by_conversation[conversation_id].append(response_id)
    pipeline = client.pipeline(transaction=True)
    pipeline.delete(*(redis_keys.affinity_response(member) for member in members))
    for conversation_id, response_ids in by_conversation.items():
        pipeline.zrem(redis_keys.affinity_conversation(conversation_id), *response_ids)
    pipeline.delete(account_key)
    pipeline.execute()
    return len(members)
