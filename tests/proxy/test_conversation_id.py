"""The local conversation id and stable key of spec §2.5."""

from __future__ import annotations

from proxy.domain.conversation import local_conversation_id, stable_key
from proxy.domain.upstream_request import read_client_identity

KEY = "key_a"


def _body(**extra):
    return {
        "model": "gpt-5",
        "instructions": "You are helpful.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
        **extra,
    }


def test_stable_key_is_uuid_shaped_and_ignores_leading_system_reminders():
    plain = stable_key(_body())
    assert [len(part) for part in plain.split("-")] == [8, 4, 4, 4, 12]
    reminded = _body(
        input=[
            {
                "role": "user",
                "content": "<system-reminder>today is monday</system-reminder>\nhello",
            }
        ]
    )
    assert stable_key(reminded) == plain
    assert stable_key(_body(model="gpt-5-mini")) != plain
    assert stable_key(_body(instructions="x" * 2000 + "tail")) == stable_key(
        _body(instructions="x" * 2000 + "other tail")
    )


def test_conversation_id_anchors_on_the_clients_own_ids_first():
    body = _body(prompt_cache_key="pck-1")
    by_key = local_conversation_id(body, read_client_identity(body, {}, client_key_id=KEY), KEY)
    assert by_key.startswith("lc_")
    # The same prompt_cache_key with other content is the same conversation ...
    other = _body(prompt_cache_key="pck-1", input="something else")
    assert (
        local_conversation_id(other, read_client_identity(other, {}, client_key_id=KEY), KEY)
        == by_key
    )
    # ... a session id anchors when there is no prompt_cache_key ...
    session_a = local_conversation_id(
        _body(), read_client_identity(_body(), {"session-id": "s1"}, client_key_id=KEY), KEY
    )
    session_b = local_conversation_id(
        _body(), read_client_identity(_body(), {"session-id": "s2"}, client_key_id=KEY), KEY
    )
    assert session_a != session_b
    # ... and without any id, the first turn's content does (a new first message, a new one).
    no_ids = local_conversation_id(
        _body(), read_client_identity(_body(), {}, client_key_id=KEY), KEY
    )
    again = local_conversation_id(
        _body(), read_client_identity(_body(), {}, client_key_id=KEY), KEY
    )
    assert no_ids == again != session_a
    assert "pck-1" not in by_key


def test_the_same_anchor_under_another_client_key_is_another_conversation():
    """Issue 34: a conversation belongs to the key that started it — key B sending key A's
    prompt_cache_key (or session id, or first message) has a conversation of its own, so it is
    neither steered to A's account nor given A's pooled upstream socket."""
    for body, headers in (
        (_body(prompt_cache_key="pck-1"), {}),
        (_body(), {"session-id": "s1"}),
        (_body(), {"thread-id": "t1"}),
        (_body(), {}),
    ):
        identity = read_client_identity(body, headers, client_key_id=None)
        of_a = local_conversation_id(body, identity, "key_a")
        assert of_a == local_conversation_id(body, identity, "key_a")
        assert of_a != local_conversation_id(body, identity, "key_b")
        assert of_a != local_conversation_id(body, identity, None)
