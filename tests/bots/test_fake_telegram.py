"""The fake Bot API behaves like Telegram where the bot depends on it (real HTTP, raw calls)."""

from __future__ import annotations

import pytest
import requests


def _call(telegram, method: str, **params) -> tuple[int, dict]:
    response = requests.post(
        f"{telegram.api_base}/bot{telegram.token}/{method}", json=params, timeout=5
    )
    return response.status_code, response.json()


def _error(status: int, description: str) -> tuple[int, dict]:
    return status, {"ok": False, "error_code": status, "description": description}


@pytest.fixture
def chat(telegram):
    return telegram.support_chat_id


def test_a_topic_id_is_the_id_of_its_creation_message(telegram, chat):
    status, body = _call(telegram, "createForumTopic", chat_id=chat, name="Ann")
    assert status == 200
    thread_id = body["result"]["message_thread_id"]

    _, sent = _call(telegram, "sendMessage", chat_id=chat, message_thread_id=thread_id, text="x")

    assert sent["result"]["message_id"] == thread_id + 1
    assert sent["result"]["message_thread_id"] == thread_id
    assert sent["result"]["is_topic_message"] is True


def test_general_is_addressed_without_a_thread_id(telegram, chat):
    assert _call(telegram, "sendMessage", chat_id=chat, message_thread_id=1, text="x") == _error(
        400, "Bad Request: message thread not found"
    )
    status, body = _call(telegram, "sendMessage", chat_id=chat, text="x")
    assert status == 200
    assert "message_thread_id" not in body["result"]


def test_closed_and_deleted_topics(telegram, chat, admin):
    thread_id = telegram.create_topic_by_hand("Ann")
    telegram.close_topic_by_hand(thread_id, by=admin)

    assert _call(telegram, "sendMessage", chat_id=chat, message_thread_id=thread_id, text="x") == (
        _error(400, "Bad Request: TOPIC_CLOSED")
    )
    assert _call(telegram, "closeForumTopic", chat_id=chat, message_thread_id=thread_id) == (
        _error(400, "Bad Request: TOPIC_NOT_MODIFIED")
    )
    telegram.delete_topic_by_hand(thread_id)
    assert _call(telegram, "sendMessage", chat_id=chat, message_thread_id=thread_id, text="x") == (
        _error(400, "Bad Request: message thread not found")
    )
    assert _call(telegram, "reopenForumTopic", chat_id=chat, message_thread_id=thread_id) == (
        _error(400, "Bad Request: TOPIC_ID_INVALID")
    )


def test_private_chats_need_a_user_who_wrote_first_and_did_not_block(telegram):
    user = telegram.user(77, "Ann")
    assert _call(telegram, "sendMessage", chat_id=77, text="x") == _error(
        403, "Forbidden: bot can't initiate conversation with a user"
    )
    telegram.private_message(user, text="hi")
    assert _call(telegram, "sendMessage", chat_id=77, text="x")[0] == 200
    telegram.block(77)
    assert _call(telegram, "sendMessage", chat_id=77, text="x") == _error(
        403, "Forbidden: bot was blocked by the user"
    )


def test_editing_to_the_same_content_is_not_modified(telegram):
    telegram.private_message(telegram.user(77, "Ann"), text="hi")
    keyboard = {"inline_keyboard": [[{"text": "1", "callback_data": "v:1"}]]}
    _, sent = _call(telegram, "sendMessage", chat_id=77, text="q", reply_markup=keyboard)
    message_id = sent["result"]["message_id"]

    # Omitting reply_markup keeps the keyboard, so this changes nothing.
    status, body = _call(telegram, "editMessageText", chat_id=77, message_id=message_id, text="q")

    assert status == 400
    assert body["description"].startswith("Bad Request: message is not modified")
    _, edited = _call(
        telegram,
        "editMessageText",
        chat_id=77,
        message_id=message_id,
        text="q",
        reply_markup={"inline_keyboard": []},
    )
    assert "reply_markup" not in edited["result"]


def test_a_callback_query_is_answered_once(telegram):
    user = telegram.user(77, "Ann")
    telegram.private_message(user, text="hi")
    update = telegram.click(user, message_id=1, data="v:1")
    query_id = update["callback_query"]["id"]

    assert _call(telegram, "answerCallbackQuery", callback_query_id=query_id, text="ok")[0] == 200
    assert _call(telegram, "answerCallbackQuery", callback_query_id=query_id) == _error(
        400, "Bad Request: query is too old and response timeout expired or query ID is invalid"
    )
    assert telegram.callback_answer(query_id) == "ok"


def test_injected_faults_apply_nothing_and_are_recorded(telegram, chat):
    telegram.fail("createForumTopic", status=429, retry_after=7)

    assert _call(telegram, "createForumTopic", chat_id=chat, name="x") == (
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 7",
            "parameters": {"retry_after": 7},
        },
    )
    assert telegram.topics() == []
    assert [(call.method, call.status) for call in telegram.calls()] == [("createForumTopic", 429)]


def test_unknown_methods_and_wrong_tokens(telegram):
    assert _call(telegram, "noSuchMethod") == _error(404, "Not Found")
    response = requests.post(f"{telegram.api_base}/bot1:wrong/getMe", json={}, timeout=5)
    assert (response.status_code, response.json()) == _error(401, "Unauthorized")


def test_a_web_app_button_needs_an_https_url(telegram):
    """Mini Apps open https pages only: why a Turnstile challenge needs an https origin."""
    user = telegram.user(4001, "Wes")
    telegram.private_message(user, text="hi")

    def send(url: str) -> tuple[int, dict]:
        keyboard = {"inline_keyboard": [[{"text": "open", "web_app": {"url": url}}]]}
        return _call(telegram, "sendMessage", chat_id=user.id, text="x", reply_markup=keyboard)

    assert send("http://support.example.com/telegram/verify") == _error(
        400,
        "Bad Request: inline keyboard button Web App URL 'http://support.example.com/telegram/"
        "verify' is invalid: Only HTTPS links are allowed",
    )
    assert send("https://support.example.com/telegram/verify")[0] == 200


def test_deleting_messages_like_telegram(telegram, chat):
    thread_id = telegram.create_topic_by_hand("Ann")
    kept = telegram.bot_sends(chat, text="kept", thread_id=thread_id)
    pinned = telegram.bot_sends(chat, text="card", thread_id=thread_id)
    _call(telegram, "pinChatMessage", chat_id=chat, message_id=pinned)
    telegram.make_undeletable(chat, kept)

    assert _call(telegram, "deleteMessage", chat_id=chat, message_id=pinned) == (
        200,
        {"ok": True, "result": True},
    )
    assert telegram.pinned() == []  # a deleted message is unpinned
    assert _call(telegram, "deleteMessage", chat_id=chat, message_id=pinned) == _error(
        400, "Bad Request: message to delete not found"
    )
    assert _call(telegram, "deleteMessage", chat_id=chat, message_id=kept) == _error(
        400, "Bad Request: message can't be deleted"
    )
    assert telegram.message(chat, kept).deleted is False


def test_deleting_topics_like_telegram(telegram, chat):
    gone = telegram.create_topic_by_hand("Ann")
    stubborn = telegram.create_topic_by_hand("Ben")
    inside = telegram.bot_sends(chat, text="x", thread_id=gone)
    telegram.make_topic_undeletable(stubborn)

    assert _call(telegram, "deleteForumTopic", chat_id=chat, message_thread_id=gone)[0] == 200
    assert telegram.message(chat, inside).deleted is True  # its messages went with it
    assert _call(telegram, "deleteForumTopic", chat_id=chat, message_thread_id=gone) == _error(
        400, "Bad Request: TOPIC_ID_INVALID"
    )
    assert _call(telegram, "deleteForumTopic", chat_id=chat, message_thread_id=stubborn) == _error(
        400, "Bad Request: CHAT_ADMIN_REQUIRED"
    )
    assert [call.method for call in telegram.calls()] == ["deleteForumTopic"] * 3


class ManualClock:
    """The fake's arrival clock, moved by the test instead of sleeping through a window."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_rate_limit_answers_429_with_retry_after_and_lets_calls_through_again(telegram, chat):
    ids = [telegram.bot_sends(chat, text=str(number)) for number in range(4)]
    telegram.clock = clock = ManualClock()
    telegram.limit_rate(2)

    answers = [_call(telegram, "deleteMessage", chat_id=chat, message_id=i) for i in ids[:3]]

    assert [status for status, _ in answers] == [200, 200, 429]
    assert answers[2][1] == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1},
    }
    assert telegram.message(chat, ids[2]).deleted is False  # refused calls change nothing
    assert _call(telegram, "sendMessage", chat_id=chat, text="other methods pass")[0] == 200
    limited = telegram.calls("deleteMessage")[2]
    assert limited.retry_after == 1
    clock.advance(1.05)  # the window of the first two calls has passed
    assert _call(telegram, "deleteMessage", chat_id=chat, message_id=ids[2])[0] == 200
    calls = telegram.calls()
    assert all(earlier.at <= later.at for earlier, later in zip(calls, calls[1:], strict=False))


def test_telegrams_group_limit_answers_429_with_the_retry_after_of_its_window(telegram, chat):
    """``enforce_telegram_limits`` (off unless a test or bench turns it on): messages into one
    group beyond ``group_per_window`` in any ``group_window`` get 429 with the seconds until the
    window's oldest message ages out; topic creation counts; private chats are not a group."""
    alice = telegram.user(5005, "Alice")
    telegram.met(alice)
    telegram.enforce_telegram_limits(chat_interval=0.01, group_per_window=2, group_window=2.0)
    telegram.clock = clock = ManualClock()

    first = _call(telegram, "createForumTopic", chat_id=chat, name="Ann")
    clock.advance(0.02)
    second = _call(telegram, "sendMessage", chat_id=chat, text="two")
    clock.advance(0.02)
    third = _call(telegram, "sendMessage", chat_id=chat, text="three")
    private = _call(telegram, "sendMessage", chat_id=alice.id, text="a private chat")

    assert [first[0], second[0], third[0], private[0]] == [200, 200, 429, 200]
    assert third[1] == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 2",
        "parameters": {"retry_after": 2},
    }
    assert [message.text for message in telegram.bot_messages(chat)] == ["two"]
    clock.advance(2.05)  # the window of the first two has passed
    assert _call(telegram, "sendMessage", chat_id=chat, text="three")[0] == 200


def test_reset_forgets_everything(telegram, chat):
    telegram.create_topic_by_hand("Ann")
    telegram.limit_rate(1)
    telegram.fail("getMe")
    _call(telegram, "sendMessage", chat_id=chat, text="x")

    telegram.reset()

    assert (telegram.topics(), telegram.calls(), telegram.bot_messages(chat)) == ([], [], [])
    assert _call(telegram, "getMe")[0] == 200  # the fault is gone
    thread_id = telegram.create_topic_by_hand("Ben")
    assert thread_id == 100  # message ids start again
