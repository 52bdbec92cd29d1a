"""Update classification (spec §1.7) is a pure function of the update and SUPPORT_CHAT_ID."""

from __future__ import annotations

import pytest

from bots.pipeline.classify import Classification, UpdateKind, classify_update

GROUP = -1001234567890
INBOUND = Classification(UpdateKind.INBOUND)
IGNORE = Classification(UpdateKind.IGNORE)
CALLBACK = Classification(UpdateKind.CALLBACK)
GROUP_CALLBACK = Classification(UpdateKind.GROUP_CALLBACK)
BROADCAST = Classification(UpdateKind.BROADCAST)


def _private(**message) -> dict:
    return {
        "update_id": 1,
        "message": {"message_id": 5, "chat": {"id": 42, "type": "private"}, **message},
    }


def _group(chat_id: int = GROUP, **message) -> dict:
    return {
        "update_id": 1,
        "message": {
            "message_id": 7,
            "from": {"id": 111},
            "chat": {"id": chat_id, "type": "supergroup"},
            **message,
        },
    }


def _callback(chat_id: int, chat_type: str = "private", **overrides) -> dict:
    callback = {
        "id": "77",
        "from": {"id": 42},
        "message": {"message_id": 9, "chat": {"id": chat_id, "type": chat_type}},
        "data": "v:3",
    }
    callback.update(overrides)
    return {"update_id": 1, "callback_query": callback}


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        (_private(text="hello"), INBOUND),
        (_private(text="/broadcast news"), INBOUND),  # private /broadcast is a user message
        (_private(sticker={"file_id": "s"}), INBOUND),
        (_group(message_thread_id=55, text="hi"), Classification(UpdateKind.OUTBOUND, 55)),
        (_group(message_thread_id=0, text="hi"), IGNORE),
        (_group(message_thread_id="55", text="hi"), IGNORE),
        (_group(text="plain chatter in General"), IGNORE),
        (_group(text="/broadcast"), BROADCAST),
        (_group(text="/broadcast@hodor_bot Title\nbody"), BROADCAST),
        (_group(text="/broadcasts"), IGNORE),
        (_group(text="/help"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/help@hodor_bot"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/verifymode button"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/verifymode_turnstile"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/verifyon"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/verifyoff@hodor_bot"), Classification(UpdateKind.OUTBOUND, 1)),
        (_group(text="/ban"), IGNORE),
        (_group(text="/archive"), IGNORE),
        (_group(text="/verifymodes"), IGNORE),
        (_group(text="/helpx"), IGNORE),
        (_group(text="/HELP"), IGNORE),
        (_group(chat_id=-1009999999, text="/help"), IGNORE),  # another group
        (_group(chat_id=-1009999999, message_thread_id=5, text="x"), IGNORE),
        (
            _group(message_thread_id=55, forum_topic_closed={}),
            Classification(UpdateKind.TOPIC_EVENT, 55),
        ),
        (
            _group(message_thread_id=55, forum_topic_reopened={}),
            Classification(UpdateKind.TOPIC_EVENT, 55),
        ),
        (_group(message_thread_id=55, forum_topic_closed={}, forum_topic_reopened={}), IGNORE),
        (_group(message_thread_id=55, forum_topic_closed=True), IGNORE),
        (_group(forum_topic_closed={}), IGNORE),  # no thread
        (_callback(42), CALLBACK),
        (_callback(GROUP, "supergroup"), GROUP_CALLBACK),
        (_callback(-1009999999, "supergroup"), IGNORE),
        (_callback(42, id=77), IGNORE),  # id must be a string
        (_callback(42, **{"from": {"id": "42"}}), IGNORE),
        (_callback(42, message=None), IGNORE),
        ({"update_id": 1, "edited_message": {"chat": {"id": 42, "type": "private"}}}, IGNORE),
        ({"update_id": 1, "channel_post": {"chat": {"id": -100, "type": "channel"}}}, IGNORE),
        ({"update_id": 1, "message": "text"}, IGNORE),
        ({"update_id": 1, "message": {"chat": {"id": True, "type": "private"}}}, IGNORE),
        ([], IGNORE),
    ],
)
def test_classification(update, expected):
    assert classify_update(update, GROUP) == expected


@pytest.mark.parametrize(
    "update", [_private(text="hello"), _group(message_thread_id=5, text="x"), _callback(42)]
)
def test_invalid_support_chat_id_ignores_everything(update):
    assert classify_update(update, None) == IGNORE
