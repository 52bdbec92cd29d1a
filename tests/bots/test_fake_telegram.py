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
