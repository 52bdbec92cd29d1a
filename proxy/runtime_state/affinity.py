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
from typing import Any

from proxy import redis_keys
from proxy.runtime_state import redis_client

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


def affinity_record(
    *,
    response_id: str,
    account_id: str,
    conversation_id: str | None,
    created_at: datetime,
    fields: dict[str, Any] | None = None,
    ttl_seconds: int = AFFINITY_TTL_SECONDS,
) -> None:
    """Record that ``account_id`` produced ``response_id`` (one MULTI transaction).

    ``fields`` carries the rest of the seed's record (turnState, instructionsHash, inputTokens,
    functionCallIds, variantHash, continuationScope, replay). Index members older than the TTL
    are pruned on the way.
    """
    fields = dict(fields or {})
    replay = fields.pop("replay", None)
    # The replay node (up to 2 MiB) comes last, so that the request path's lookup script can
    # match the variant and return the record without it by position, without decoding it
    # (proxy.dispatch.continuity); default json separators.
    record = {
        "accountId": account_id,
        "conversationId": conversation_id,
        **fields,
        "createdAt": created_at.isoformat(),
        "replay": replay,
    }
    score = _epoch_ms(created_at)
    oldest_kept = score - ttl_seconds * 1000
    pipeline = redis_client().pipeline(transaction=True)
    pipeline.set(
        redis_keys.affinity_response(response_id),
        json.dumps(record),
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
    members = [member.decode() for member in client.zrevrange(index_key, 0, -1)]
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
    members = [member.decode() for member in client.zrange(account_key, 0, -1)]
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
