"""Replay nodes at their limits (seed 004 §4B.3: 2 MiB node, 16 MiB chain, depth 128), the
history they rebuild, and the spec §5.3 decision after an owner's failure — including the
WebSocket pool's ``CodexContinuationUnavailable`` reasons (end to end once that half lands)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
import redis.asyncio

from proxy.clients.codex import CodexContinuationUnavailable, CodexHTTPError
from proxy.dispatch import continuity
from proxy.dispatch.continuity import Next, after_owner_failure
from proxy.domain.client_errors import client_error_for
from proxy.domain.failures import (
    AttemptFailure,
    FailureKind,
    failure_from_error,
    history_error_code,
)
from proxy.domain.replay import (
    MAX_CHAIN_BYTES,
    MAX_DEPTH,
    MAX_NODE_BYTES,
    build_node,
    reconstruct,
    replay_body,
)
from proxy.domain.slots import SchedulerSettings
from proxy.ledger import affinity as ledger_affinity
from proxy.ledger.affinity import AffinityWrite
from proxy.loop_resources import close_current_loop_resources
from proxy.runtime_state.affinity import affinity_record
from proxy.scheduling import scheduler
from proxy.scheduling.ranking import rank
from tests.proxy.test_scheduler import account as account_view


def _size(node: dict) -> int:
    return len(json.dumps(node, ensure_ascii=False, separators=(",", ":")).encode())


def _node_of_size(size: int, **parent) -> dict | None:
    """A first-turn node whose serialized size is exactly ``size`` (before totalBytes grows)."""
    empty = build_node(parent_response_id=None, parent_replay=None, turn_input="", turn_output=[])
    overhead = _size({**empty, "totalBytes": 0})
    return build_node(
        parent_response_id=parent.get("parent_response_id"),
        parent_replay=parent.get("parent_replay"),
        turn_input="x" * (size - overhead),
        turn_output=[],
    )


def test_a_node_of_exactly_2_mib_is_kept_and_one_byte_more_is_not():
    kept = _node_of_size(MAX_NODE_BYTES)
    assert kept is not None and kept["totalBytes"] == MAX_NODE_BYTES
    assert _node_of_size(MAX_NODE_BYTES + 1) is None


def test_depth_128_is_the_last_node_of_a_chain():
    parent = {"depth": MAX_DEPTH - 1, "totalBytes": 10}
    node = build_node(
        parent_response_id="resp_p", parent_replay=parent, turn_input="hi", turn_output=[]
    )
    assert node["depth"] == MAX_DEPTH
    too_deep = build_node(
        parent_response_id="resp_p",
        parent_replay={"depth": MAX_DEPTH, "totalBytes": 10},
        turn_input="hi",
        turn_output=[],
    )
    assert too_deep is None


def test_a_chain_stops_getting_nodes_past_16_mib():
    turn = {"parent_response_id": "resp_p", "turn_input": "x" * 1000, "turn_output": []}
    own = build_node(parent_replay={"depth": 1, "totalBytes": 0}, **turn)["totalBytes"]

    at_limit = build_node(parent_replay={"depth": 1, "totalBytes": MAX_CHAIN_BYTES - own}, **turn)
    over = build_node(parent_replay={"depth": 1, "totalBytes": MAX_CHAIN_BYTES - own + 1}, **turn)

    assert at_limit["totalBytes"] == MAX_CHAIN_BYTES
    assert over is None


def test_a_parent_without_a_node_gives_its_children_none():
    assert (
        build_node(parent_response_id="resp_p", parent_replay=None, turn_input="a", turn_output=[])
        is None
    )


def test_ids_and_encrypted_content_are_stripped_call_ids_kept():
    node = build_node(
        parent_response_id=None,
        parent_replay=None,
        turn_input=[
            {"type": "function_call_output", "id": "x", "call_id": "call_1", "output": "ok"},
        ],
        turn_output=[
            {
                "type": "reasoning",
                "id": "rs_1",
                "encrypted_content": "blob",
                "summary": [{"type": "summary_text", "text": "t", "encrypted_content": "deep"}],
            },
            {"type": "function_call", "id": "fc_1", "call_id": "call_2", "arguments": "{}"},
        ],
    )
    assert node["turnInput"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    ]
    assert node["turnOutput"] == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
        {"type": "function_call", "call_id": "call_2", "arguments": "{}"},
    ]


def _records(count: int, key: str | None = "key_a") -> dict[str, dict]:
    records, parent, replay = {}, None, None
    for index in range(count):
        replay = build_node(
            parent_response_id=parent,
            parent_replay=replay,
            turn_input=f"q{index}",
            turn_output=[{"type": "message", "id": f"m{index}", "content": f"a{index}"}],
            client_key_id=key,
        )
        records[f"resp_{index}"] = {"clientKeyId": key, "replay": replay}
        parent = f"resp_{index}"
    return records


def test_the_history_is_rebuilt_oldest_first_from_the_parent_links():
    history = reconstruct("resp_2", _records(3), client_key_id="key_a")

    assert history == [
        item
        for index in range(3)
        for item in (
            {"type": "message", "role": "user", "content": f"q{index}"},
            {"type": "message", "content": f"a{index}"},
        )
    ]


def test_a_missing_link_or_node_means_no_history():
    records = _records(3)
    del records["resp_0"]
    assert reconstruct("resp_2", records, client_key_id="key_a") is None
    records = _records(3)
    records["resp_1"]["replay"] = None
    assert reconstruct("resp_2", records, client_key_id="key_a") is None


def test_a_history_is_rebuilt_only_from_the_asking_keys_own_records_and_nodes():
    """Issue 34: another key's turns never reach a replay, nor do nodes written before records
    named their key (nobody's)."""
    assert reconstruct("resp_2", _records(3), client_key_id="key_b") is None
    assert reconstruct("resp_2", _records(3, key=None), client_key_id=None) is None
    # One link of the chain of another key (its record, or only its node) breaks the chain.
    records = _records(3)
    records["resp_0"]["clientKeyId"] = "key_b"
    assert reconstruct("resp_2", records, client_key_id="key_a") is None
    records = _records(3)
    records["resp_1"]["replay"]["clientKeyId"] = "key_b"
    assert reconstruct("resp_2", records, client_key_id="key_a") is None
    # A node of the era before the field (no clientKeyId at all).
    records = _records(3)
    del records["resp_0"]["replay"]["clientKeyId"], records["resp_0"]["clientKeyId"]
    assert reconstruct("resp_2", records, client_key_id="key_a") is None


def test_the_replay_body_drops_the_previous_id_and_prepends_the_history():
    body = {"model": "m", "previous_response_id": "resp_1", "input": [{"id": "i", "x": 1}]}

    assert replay_body(body, [{"h": 1}]) == {"model": "m", "input": [{"h": 1}, {"x": 1}]}


# ----------------------------------------------------------------------------- decisions


def _history_failure(code: str) -> AttemptFailure:
    body = json.dumps({"error": {"code": code, "message": "no"}}).encode()
    return failure_from_error(CodexHTTPError(400, {}, body))


@pytest.mark.parametrize(
    "code",
    [
        "previous_response_not_found",
        "invalid_encrypted_content",
        "missing_tool_output",
        "no_tool_output",
    ],
)
def test_history_errors_are_recognised_in_http_bodies_and_sse_codes(code):
    assert history_error_code(_history_failure(code)) == code
    assert history_error_code(AttemptFailure(FailureKind.RESPONSE_FAILED, code=code)) == code
    assert history_error_code(_history_failure("invalid_request")) is None


def _continuation(reason: str) -> AttemptFailure:
    return failure_from_error(CodexContinuationUnavailable(reason))


REASONS = [
    "pool_unavailable",
    "fresh_connection_required",
    "connection_busy",
    "latest_response_mismatch",
    "reused_connection_lost",
]


@pytest.mark.parametrize("reason", REASONS)
def test_an_unavailable_continuation_is_replayed_on_the_same_account_when_a_replay_exists(reason):
    failure = _continuation(reason)
    assert failure.kind == FailureKind.CONTINUATION_UNAVAILABLE and not failure.rotates

    assert (
        after_owner_failure(failure, has_replay=True, same_account_replay_spent=False)
        is Next.RETRY_SAME_WITH_REPLAY
    )


@pytest.mark.parametrize("reason", REASONS)
def test_an_unavailable_continuation_without_replay_is_busy_or_unavailable(reason):
    decision = after_owner_failure(
        _continuation(reason), has_replay=False, same_account_replay_spent=False
    )

    assert decision is (Next.BUSY if reason == "connection_busy" else Next.UNAVAILABLE)
    error = client_error_for(_continuation(reason), 1)
    if reason == "connection_busy":
        assert (error.status, error.code) == (503, "continuation_connection_busy")
        assert error.message == "The previous response connection is busy. Retry the request."
    else:
        assert (error.status, error.code) == (400, "previous_response_unavailable")


def test_the_owner_decisions_of_spec_5_3():
    history = _history_failure("previous_response_not_found")
    rate_limited = AttemptFailure(FailureKind.RATE_LIMITED, 429)
    rejected = AttemptFailure(FailureKind.CLIENT_ERROR, 400, b'{"error":{"code":"bad"}}')

    def decide(failure, has_replay, spent=False):
        return after_owner_failure(failure, has_replay=has_replay, same_account_replay_spent=spent)

    assert decide(history, True) is Next.RETRY_SAME_WITH_REPLAY
    assert decide(history, True, spent=True) is Next.GIVE_UP  # one same-account replay only
    assert decide(history, False) is Next.UNAVAILABLE
    assert decide(rate_limited, True) is Next.ROTATE_WITH_REPLAY
    assert decide(rate_limited, False) is Next.GIVE_UP  # returned as-is: no failover
    assert decide(rejected, True) is Next.GIVE_UP
    assert decide(None, True) is Next.ROTATE_WITH_REPLAY  # owner ineligible
    assert decide(None, False) is Next.UNAVAILABLE


# ----------------------------------------------------------------------------- Redis failures


def _write() -> AffinityWrite:
    return AffinityWrite(
        response_id="resp_secretish",
        account_id="acct_1",
        conversation_id="lc_x",
        turn_state=None,
        instructions_hash="0" * 64,
        input_tokens=1,
        function_call_ids=[],
        variant_hash="0" * 12,
        continuation_scope="persisted",
        created_at=datetime.now(UTC),
        turn_input="hi",
        turn_output=[],
    )


def test_a_redis_failure_while_writing_is_logged_without_ids_and_ignored(monkeypatch, caplog):
    async def unreachable(*_, **__):
        raise redis.ConnectionError("Error connecting for resp_secretish")

    monkeypatch.setattr(ledger_affinity, "execute_calls", unreachable)

    with caplog.at_level(logging.WARNING):
        asyncio.run(ledger_affinity.write_batch([_write()]))

    assert "affinity record not written (ConnectionError)" in caplog.text
    assert "resp_secretish" not in caplog.text


@pytest.mark.slow
def test_a_redis_failure_while_looking_up_means_nothing_known_to_redis(
    monkeypatch, caplog, settings, transactional_db
):
    # Then the ledger is asked (proxy/dispatch/ledger_ownership.py): it has no row of this id.
    class Unreachable:
        async def get(self):
            return redis.asyncio.Redis(port=1, socket_connect_timeout=1)

    monkeypatch.setattr(continuity, "async_redis", Unreachable())

    async def look() -> continuity.Continuity:
        try:
            return await continuity.look_up(
                previous_response_id="resp_secretish",
                conversation_id="lc_x",
                variant="v",
                client_key_id="key_a",
            )
        finally:
            # As the web process does when a loop ends: the ledger query opened this loop's
            # database pool, whose tasks asyncio.run would otherwise cancel one by one (a CI
            # run hung there for 300 s while the pool was retrying a connection).
            await close_current_loop_resources()

    with caplog.at_level(logging.WARNING):
        found = asyncio.run(look())

    assert found.external and found.record is None
    assert "asking the ledger" in caplog.text and "resp_secretish" not in caplog.text


def test_the_lookup_matches_the_records_own_variant_and_leaves_the_turns_in_redis(redis_client):
    unique = uuid.uuid4().hex
    conversation = f"lc_{unique}"
    # A client's item may carry any key; the script must not take it for the record's own.
    tricky = [
        {
            "type": "message",
            "variantHash": "wanted000000",
            "accountId": "acct_evil",
            "clientKeyId": "key_b",
        }
    ]
    node = build_node(
        parent_response_id=None,
        parent_replay=None,
        turn_input=tricky,
        turn_output=[],
        client_key_id="key_a",
    )
    now = datetime.now(UTC)
    for response, account, variant, created, key in (
        ("old", "acct_right", "wanted000000", now - timedelta(seconds=2), "key_a"),
        ("new", "acct_other", "other0000000", now - timedelta(seconds=1), "key_a"),
        # Newest, same variant, but written before records named their key: nobody's.
        ("legacy", "acct_evil", "wanted000000", now, None),
    ):
        affinity_record(
            response_id=f"resp_{response}_{unique}",
            account_id=account,
            conversation_id=conversation,
            created_at=created,
            fields={"turnState": "ts", "variantHash": variant, "replay": node},
            client_key_id=key,
        )
    summary = {
        "parentResponseId": None,
        "depth": 1,
        "totalBytes": node["totalBytes"],
        "clientKeyId": "key_a",
    }
    candidates = [account_view(name) for name in ("acct_other", "acct_evil", "acct_right")]

    async def order_for(variant: str, key: str | None) -> tuple[list[str], str | None]:
        order, slot, preferred = await scheduler.order_and_acquire(
            rank(candidates, "round_robin"),
            SchedulerSettings("round_robin", 10, 0),
            conversation=scheduler.ConversationLookup(conversation, variant, key),
        )
        await scheduler.release(slot)
        return [candidate.id for candidate in order], preferred

    def look_up(response: str, key: str | None) -> continuity.Continuity:
        return asyncio.run(
            continuity.look_up(
                previous_response_id=f"resp_{response}_{unique}",
                conversation_id="lc_y",
                variant="v",
                client_key_id=key,
            )
        )

    wanted_order, wanted = asyncio.run(order_for("wanted000000", "key_a"))
    unknown_order, unknown = asyncio.run(order_for("nothing00000", "key_a"))
    _, other_key = asyncio.run(order_for("wanted000000", "key_b"))
    _, no_key = asyncio.run(order_for("wanted000000", None))
    managed = look_up("new", "key_a")

    assert (wanted, wanted_order[0]) == ("acct_right", "acct_right")
    assert unknown is None and sorted(unknown_order) == sorted(wanted_order)
    assert other_key is None and no_key is None  # issue 34: another key's records steer nobody
    assert managed.managed and managed.preferred_account_id == "acct_other"
    assert managed.record["replay"] == summary and managed.stored_turn_state == "ts"
    assert managed.record_conversation_id == conversation
    # Another key's record, or one of nobody's: neither managed nor external, nothing of it kept.
    for found in (look_up("new", "key_b"), look_up("new", None), look_up("legacy", "key_a")):
        assert found.foreign and not found.managed and not found.external
        assert found.record is None and found.stored_turn_state is None
        assert found.preferred_account_id is None
