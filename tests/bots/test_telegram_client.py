"""The Bot API client classifies every result in one place (spec §8.2, §8.3) and never leaks
the token — tested over real HTTP against the fake Bot API."""

from __future__ import annotations

import logging

import pytest

from bots.clients.telegram import (
    TelegramClient,
    TelegramPermanentError,
    TelegramRetryableError,
    is_message_not_modified,
    is_message_to_delete_missing,
    is_topic_closed,
    is_topic_gone,
    is_topic_not_modified,
)
from tests.conftest import _free_port


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(telegram, sleeps) -> TelegramClient:
    return TelegramClient(token=telegram.token, api_base=telegram.api_base, sleep=sleeps.append)


def test_success_returns_the_result(client, telegram):
    me = client.get_me()

    assert me["id"] == telegram.bot.id
    assert me["is_bot"] is True
    [call] = telegram.calls()
    assert (call.method, call.params, call.status) == ("getMe", {}, 200)


def test_parameters_are_sent_as_json_and_none_values_are_omitted(client, telegram):
    telegram.private_message(telegram.user(42, "Ann"), text="hi")

    client.send_message(chat_id=42, text="hello", message_thread_id=None, reply_markup=None)

    assert telegram.calls("sendMessage")[0].params == {"chat_id": 42, "text": "hello"}


def test_http_400_is_permanent_with_telegram_description(client, telegram):
    with pytest.raises(TelegramPermanentError) as raised:
        client.send_message(chat_id=-1009999, text="x")

    error = raised.value
    assert (error.status, error.error_code) == (400, 400)
    assert str(error) == "sendMessage HTTP 400: Bad Request: chat not found"
    assert error.permanent is True


def test_blocked_user_is_permanent_403(client, telegram):
    user = telegram.user(43, "Ann")
    telegram.private_message(user, text="hi")
    telegram.block(user.id)

    with pytest.raises(TelegramPermanentError) as raised:
        client.send_message(chat_id=user.id, text="x")

    assert str(raised.value) == "sendMessage HTTP 403: Forbidden: bot was blocked by the user"


@pytest.mark.parametrize("status", [500, 502])
def test_server_errors_are_retryable(client, telegram, status):
    telegram.fail("getMe", status=status)

    with pytest.raises(TelegramRetryableError) as raised:
        client.get_me()

    assert raised.value.status == status
    assert raised.value.permanent is False
    assert len(telegram.calls("getMe")) == 1


def test_a_non_json_body_is_retryable(client, telegram):
    telegram.fail("getMe", status=502, mode="html")

    with pytest.raises(TelegramRetryableError, match=r"^getMe HTTP 502: response is not JSON$"):
        client.get_me()


def test_2xx_without_ok_is_retryable(client, telegram):
    telegram.fail("getMe", mode="without_ok")

    with pytest.raises(TelegramRetryableError, match=r"^getMe HTTP 200: response without ok$"):
        client.get_me()


def test_a_dropped_connection_is_retryable(client, telegram):
    telegram.fail("getMe", mode="disconnect")

    with pytest.raises(TelegramRetryableError) as raised:
        client.get_me()

    assert raised.value.status is None
    assert str(raised.value).startswith("getMe network error: ")


def test_a_refused_connection_is_retryable_and_names_no_url(sleeps):
    token = "123456:SECRET-token-value"
    client = TelegramClient(token=token, api_base=f"http://127.0.0.1:{_free_port()}")

    with pytest.raises(TelegramRetryableError) as raised:
        client.get_me()

    assert str(raised.value) == "getMe network error: ConnectionError"
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None


def test_429_with_short_retry_after_is_retried_once_in_place(client, telegram, sleeps):
    telegram.fail("getMe", status=429, retry_after=2)

    me = client.get_me()

    assert me["id"] == telegram.bot.id
    assert sleeps == [2]
    assert [call.status for call in telegram.calls("getMe")] == [429, 200]


def test_429_twice_returns_the_second_result_as_is(client, telegram, sleeps):
    telegram.fail("getMe", status=429, retry_after=1, times=2)

    with pytest.raises(TelegramRetryableError) as raised:
        client.get_me()

    assert raised.value.retry_after == 1
    assert sleeps == [1]
    assert len(telegram.calls("getMe")) == 2


@pytest.mark.parametrize("retry_after", [4, 30, None])
def test_429_with_long_or_missing_retry_after_is_retryable_without_waiting(
    client, telegram, sleeps, retry_after
):
    telegram.fail("getMe", status=429, retry_after=retry_after)

    with pytest.raises(TelegramRetryableError) as raised:
        client.get_me()

    assert raised.value.status == 429
    assert raised.value.retry_after == retry_after
    assert sleeps == []
    assert len(telegram.calls("getMe")) == 1


def test_wrong_token_is_permanent_401(telegram):
    client = TelegramClient(token="1:wrong", api_base=telegram.api_base)

    with pytest.raises(TelegramPermanentError, match=r"^getMe HTTP 401: Unauthorized$"):
        client.get_me()


def test_the_token_appears_in_no_error_and_no_log_line(telegram, caplog):
    caplog.set_level(logging.DEBUG)
    client = TelegramClient(token=telegram.token, api_base=telegram.api_base, sleep=lambda _: None)
    telegram.fail("getMe", status=429, retry_after=1)
    telegram.fail("sendMessage", mode="disconnect")
    errors = []

    client.get_me()
    for call in (
        lambda: client.send_message(chat_id=1, text="x"),
        lambda: client.send_message(chat_id=-1005, text="x"),
        lambda: client.call("noSuchMethod"),
    ):
        with pytest.raises((TelegramRetryableError, TelegramPermanentError)) as raised:
            call()
        errors.append(raised.value)

    texts = [str(error) for error in errors] + [record.getMessage() for record in caplog.records]
    assert len(errors) == 3
    assert all(telegram.token not in text for text in texts)
    assert all(error.__cause__ is None and error.__context__ is None for error in errors)
    assert telegram.token not in repr(client)


def _permanent(description: str) -> TelegramPermanentError:
    return TelegramPermanentError(method="m", status=400, description=description)


def test_description_sub_cases():
    assert is_topic_gone(_permanent("Bad Request: message thread not found"))
    assert is_topic_gone(_permanent("Bad Request: TOPIC_ID_INVALID"))
    assert not is_topic_gone(_permanent("Bad Request: TOPIC_CLOSED"))
    assert not is_topic_gone(_permanent("Forbidden: bot was kicked from the supergroup chat"))
    assert is_topic_closed(_permanent("Bad Request: TOPIC_CLOSED"))
    assert is_topic_not_modified(_permanent("Bad Request: TOPIC_NOT_MODIFIED"))
    assert is_message_to_delete_missing(_permanent("Bad Request: message to delete not found"))
    assert is_message_not_modified(_permanent("Bad Request: message is not modified: same"))
    # A retryable error is never one of the sub-cases.
    retryable = TelegramRetryableError(
        method="m", status=500, description="message thread not found"
    )
    assert not is_topic_gone(retryable)
