"""Replay nodes (seed 004 §4B.3, spec §5.1, §5.3): the bounded, per-turn history that lets a
``previous_response_id`` chain move to another account by sending its whole input again.

Each node holds only its own turn — the client's ``input`` and the response's ``output`` —
and its parent's response id; the history is rebuilt by walking the parents (no node repeats
the cumulative input, so a long chain does not grow quadratically). Items are sanitized on
the way in: the upstream ``id`` of every top-level item and ``encrypted_content`` at every
depth are removed (both are bound to the account that produced them); ``call_id`` and the
other protocol links stay.

Each node names the client key whose turn it holds (``clientKeyId``, issue 34), and so does
its record: a history is rebuilt only from nodes of the key asking for it, so a chain can never
carry another key's turns into a request.

Pure functions: no Redis here (``proxy.dispatch.continuity`` reads, ``proxy.ledger.affinity``
writes).
"""

from __future__ import annotations

import json
from typing import Any

MAX_NODE_BYTES = 2 * 1024 * 1024
MAX_CHAIN_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 128


def _without_encrypted_content(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _without_encrypted_content(item)
            for key, item in value.items()
            if key != "encrypted_content"
        }
    if isinstance(value, list):
        return [_without_encrypted_content(item) for item in value]
    return value


def as_items(input_value: Any) -> list:
    """The client's ``input`` as a list of items (a string input is one user message)."""
    if isinstance(input_value, list):
        return input_value
    if isinstance(input_value, str):
        return [{"type": "message", "role": "user", "content": input_value}]
    return []


def sanitized(items: list) -> list:
    """``items`` with ``id`` removed from each top-level item and ``encrypted_content`` removed
    at every depth."""
    cleaned = []
    for item in items:
        item = _without_encrypted_content(item)
        if isinstance(item, dict):
            item.pop("id", None)
        cleaned.append(item)
    return cleaned


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def build_node(
    *,
    parent_response_id: str | None,
    parent_replay: dict | None,
    turn_input: Any,
    turn_output: list,
    client_key_id: str | None = None,
) -> dict | None:
    """The replay node of a completed turn, or None when it would break a cap (2 MiB node,
    16 MiB chain, depth 128) — the response itself is not affected.

    ``parent_response_id`` None: the first turn of a chain. Otherwise ``parent_replay`` must be
    the parent's node (a parent without one cannot be rebuilt, so neither can this turn).
    """
    if parent_response_id is None:
        parent_replay = None
    elif not isinstance(parent_replay, dict):
        return None
    depth = 1 if parent_replay is None else int(parent_replay.get("depth", 0)) + 1
    if depth > MAX_DEPTH:
        return None
    # The small fields first: the request path reads a record up to "turnInput" only.
    node = {
        "parentResponseId": parent_response_id,
        "depth": depth,
        "totalBytes": 0,
        "clientKeyId": client_key_id,
        "turnInput": sanitized(as_items(turn_input)),
        "turnOutput": sanitized(turn_output),
    }
    own_bytes = _size(node)
    if own_bytes > MAX_NODE_BYTES:
        return None
    parent_total = 0 if parent_replay is None else int(parent_replay.get("totalBytes", 0))
    total = parent_total + own_bytes
    if total > MAX_CHAIN_BYTES:
        return None
    node["totalBytes"] = total
    return node


def _owned_node(record: Any, client_key_id: str | None) -> dict | None:
    """The record's node when both the record and its node are ``client_key_id``'s."""
    node = record.get("replay") if isinstance(record, dict) else None
    if not isinstance(node, dict) or not client_key_id:
        return None
    if record.get("clientKeyId") != client_key_id or node.get("clientKeyId") != client_key_id:
        return None
    return node


def reconstruct(
    response_id: str, records: dict[str, dict], *, client_key_id: str | None
) -> list | None:
    """The full history up to and including ``response_id`` (every turn's input then its
    output, oldest first), from the affinity ``records`` by response id; None when a link is
    missing, has no node, belongs to another client key than ``client_key_id`` (or to none),
    or the chain breaks its depth or size."""
    turns: list[dict] = []
    current: str | None = response_id
    while current is not None:
        node = _owned_node(records.get(current), client_key_id)
        if node is None or len(turns) >= MAX_DEPTH:
            return None
        turns.append(node)
        current = node.get("parentResponseId")
    if int(turns[0].get("totalBytes", 0)) > MAX_CHAIN_BYTES or turns[-1].get("depth") != 1:
        return None
    history: list = []
    for node in reversed(turns):
        history += node.get("turnInput") or []
        history += node.get("turnOutput") or []
    return history


def replay_body(body: dict, history: list) -> dict:
    """The client's body as a full replay: ``input`` = the history then this turn's input
    (sanitized), ``previous_response_id`` removed. Key order is kept."""
    replayed = {key: value for key, value in body.items() if key != "previous_response_id"}
    replayed["input"] = history + sanitized(as_items(body.get("input")))
    return replayed
