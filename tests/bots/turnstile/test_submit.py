"""``POST /telegram/api/verify/turnstile`` (spec §5.5): every status and code, in the fixed order,
with initData signed by the bot token and the fake Siteverify (real HTTP).

The user's request is issued the real way (the user writes to the bot in Turnstile mode and gets
the Mini App button); the page's origin is PUBLIC_BASE_URL (https://support.example.com).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from bots import texts
from bots.models import Bot, BotUser, RelayedMessage, Topic
from bots.services.users import user_ban
from tests.bots.helpers import make_user, set_switches, table_state, user_row
from tests.bots.turnstile.helpers import (
    HOSTNAME,
    error_body,
    init_data_for,
    latest_link,
    pending_columns,
    submit,
)
from tests.fakes.telegram_webapp import sign_init_data


def _assert_refused(response, status: int, code: str, message: str) -> None:
    assert (response.status_code, response.json()) == (status, error_body(code, message))
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "no-referrer"


# ------------------------------------------------------------------ 200


def test_a_valid_submit_verifies_the_user_and_tells_them(
    send, telegram, turnstile, user, clock, pending
):
    response = send()

    assert response.status_code == 200
    assert response.content == b'{"status":"verified"}'
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response["X-Content-Type-Options"] == "nosniff"
    row = user_row(telegram, user)
    assert (row.is_verified, row.verified_at) == (True, clock.now)
    assert pending_columns(row) == (None,) * 6
    [verify] = turnstile.siteverify_requests()
    sent = verify.json()
    assert set(sent) == {"secret", "response", "idempotency_key"}
    assert sent["secret"] == turnstile.secret_key
    assert uuid.UUID(sent["idempotency_key"])
    challenge = telegram.message(user.id, pending.message.message_id)
    assert (challenge.text, challenge.reply_markup) == (texts.verified_message(), None)
    assert RelayedMessage.objects.count() == 0  # the dropped message is never replayed


def test_after_verifying_the_next_message_is_relayed(send, webhook, telegram, user):
    assert send().status_code == 200

    webhook.deliver_ok(telegram.private_message(user, text="now it works"))

    topic = Topic.objects.get(user_id=user.id)
    assert telegram.topic_messages(topic.thread_id)[-1].text == "now it works"


def test_without_an_origin_header_the_submit_is_accepted(send):
    assert send(origin=None).status_code == 200


def test_a_verified_notice_failure_still_answers_200(send, telegram, user):
    telegram.fail("editMessageText", status=500, times=2)

    assert send().status_code == 200
    assert user_row(telegram, user).is_verified is True


def test_a_reverifying_user_gets_their_card_back_to_verified(
    webhook, turnstile_settings, telegram, turnstile, client, clock
):
    """A verified user over the rate limit is sent back through verification; passing the web
    check edits the pinned card back to ✅."""
    turnstile_settings.MAX_MESSAGES_PER_MINUTE = "1"
    ruth = telegram.user(8102, "Ruth")
    make_user(ruth, bot_id=telegram.bot.id, now=clock.now)
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(ruth, text="one"))
    webhook.deliver_ok(telegram.private_message(ruth, text="two"))  # over the limit
    topic = Topic.objects.get(user_id=ruth.id)
    card = telegram.message(telegram.support_chat_id, topic.pinned_msg_id)
    assert card.text.endswith("验证状态：❌ 未验证")
    link = latest_link(telegram, ruth)
    overflow = telegram.bot_messages(ruth.id)[-1].text
    assert overflow == f"{texts.rate_limited_prefix(1)}\n\n{texts.challenge_turnstile()}"

    response = submit(
        client,
        request_id=link.request_id,
        init_data=init_data_for(telegram, ruth, clock.now),
        token=turnstile.issue_token(cdata=link.request_id, hostname=HOSTNAME),
    )

    assert response.status_code == 200
    assert card.text.endswith("验证状态：✅ 已验证")


# ------------------------------------------------------------------ 1. origin, 2. the body


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://support.example.com", "null", ""]
)
def test_another_origin_is_forbidden_before_anything_else(origin, send, turnstile, telegram, user):
    before = table_state()

    response = send(origin=origin, body=b"not even json")

    _assert_refused(response, 403, "forbidden", texts.verify_error_origin())
    assert table_state() == before
    assert turnstile.siteverify_requests() == []


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]
)
def test_a_body_that_is_not_json_is_refused(content_type, send, turnstile):
    response = send(content_type=content_type)

    _assert_refused(response, 400, "invalid_request", texts.verify_error_invalid_request())
    assert turnstile.siteverify_requests() == []


def test_json_with_a_charset_is_json(send):
    assert send(content_type="application/json; charset=utf-8").status_code == 200


def test_a_body_over_16_kib_is_too_large(send, pending, turnstile):
    padded = b'{"requestId":"' + pending.request_id.encode() + b'"' + b" " * 16 * 1024 + b"}"

    response = send(body=padded)

    _assert_refused(response, 413, "payload_too_large", texts.verify_error_too_large())
    assert turnstile.siteverify_requests() == []


def test_a_body_of_exactly_16_kib_is_read(send, pending, telegram, user, clock, turnstile):
    import json

    fields = json.dumps(
        {
            "requestId": pending.request_id,
            "initData": init_data_for(telegram, user, clock.now),
            "turnstileToken": turnstile.issue_token(cdata=pending.request_id, hostname=HOSTNAME),
        }
    ).encode()
    body = fields[:-1] + b" " * (16 * 1024 - len(fields)) + b"}"
    assert len(body) == 16 * 1024

    assert send(body=body).status_code == 200


def test_the_content_type_is_checked_before_the_size(send):
    response = send(body=b"x" * 20000, content_type="text/plain")

    assert response.status_code == 400


def _fields(pending, telegram, user, clock, turnstile) -> dict:
    return {
        "requestId": pending.request_id,
        "initData": init_data_for(telegram, user, clock.now),
        "turnstileToken": turnstile.issue_token(cdata=pending.request_id, hostname=HOSTNAME),
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requestId", None),
        ("requestId", 42),
        ("requestId", "A" * 64),
        ("requestId", "a" * 63),
        ("requestId", "a" * 65),
        ("requestId", "g" * 64),
        ("initData", None),
        ("initData", ""),
        ("initData", "x" * 8193),
        ("initData", ["user=1"]),
        ("turnstileToken", None),
        ("turnstileToken", ""),
        ("turnstileToken", "t" * 2049),
        ("turnstileToken", 7),
    ],
)
def test_each_field_is_validated(field, value, send, pending, telegram, user, clock, turnstile):
    body = _fields(pending, telegram, user, clock, turnstile)
    if value is None:
        del body[field]
    else:
        body[field] = value
    before = table_state()

    response = send(body=body)

    _assert_refused(response, 400, "invalid_request", texts.verify_error_invalid_request())
    assert table_state() == before
    assert turnstile.siteverify_requests() == []


@pytest.mark.parametrize("raw", [b"{", b"[]", b'"text"', b"\xff\xfe{}", b"null"])
def test_a_body_that_is_not_a_json_object_is_refused(raw, send):
    response = send(body=raw)

    _assert_refused(response, 400, "invalid_request", texts.verify_error_invalid_request())


def test_client_supplied_ids_are_ignored(send, pending, telegram, user, clock, turnstile):
    body = {**_fields(pending, telegram, user, clock, turnstile), "userId": 1, "botId": 2}

    assert send(body=body).status_code == 200
    assert user_row(telegram, user).is_verified is True


# ------------------------------------------------------------------ 3. readiness


def test_without_a_bot_row_it_is_unavailable(send, turnstile):
    Bot.objects.all().delete()

    _assert_refused(send(), 503, "unavailable", texts.verify_error_unavailable())
    assert turnstile.siteverify_requests() == []


@pytest.mark.parametrize("name", ["TELEGRAM_BOT_TOKEN", "TURNSTILE_SECRET_KEY"])
def test_without_the_token_or_the_secret_it_is_unavailable(
    name, send, turnstile_settings, turnstile, telegram, user
):
    setattr(turnstile_settings, name, None)

    _assert_refused(send(), 503, "unavailable", texts.verify_error_unavailable())
    assert user_row(telegram, user).is_verified is False
    assert turnstile.siteverify_requests() == []


@pytest.mark.parametrize("switches", [{"verify_enabled": "0"}, {"verify_mode": "math"}])
def test_outside_turnstile_mode_it_is_a_conflict(switches, send, turnstile, telegram, user):
    set_switches(**switches)

    _assert_refused(send(), 409, "conflict", texts.verify_error_mode_changed())
    assert user_row(telegram, user).is_verified is False
    assert turnstile.siteverify_requests() == []


# ------------------------------------------------------------------ 4. identity


def test_a_tampered_init_data_is_unauthorized(send, telegram, user, clock, turnstile):
    genuine = init_data_for(telegram, user, clock.now)
    tampered = genuine.replace("%22id%22%3A8101", "%22id%22%3A8109")
    assert tampered != genuine

    _assert_refused(send(init_data=tampered), 401, "unauthorized", texts.verify_error_identity())
    assert turnstile.siteverify_requests() == []


def test_init_data_of_another_bot_is_unauthorized(send, user, clock):
    other_bot = sign_init_data("999:another-bots-token", user, auth_date=int(clock.now.timestamp()))

    _assert_refused(send(init_data=other_bot), 401, "unauthorized", texts.verify_error_identity())


@pytest.mark.parametrize(("age", "status"), [(300, 200), (301, 401), (-30, 200), (-31, 401)])
def test_init_data_age_limits(age, status, send, telegram, user, clock):
    signed_at = clock.now - timedelta(seconds=age)

    response = send(init_data=init_data_for(telegram, user, signed_at))

    assert response.status_code == status
    assert user_row(telegram, user).is_verified is (status == 200)


def test_init_data_without_a_user_is_unauthorized(send, telegram, clock):
    without_user = sign_init_data(telegram.token, {}, auth_date=int(clock.now.timestamp()))
    without_user = "&".join(p for p in without_user.split("&") if not p.startswith("user="))

    assert send(init_data=without_user).status_code == 401


# ------------------------------------------------------------------ 5. the user's request


def test_a_user_without_a_row_is_not_found_and_not_created(send, telegram, user):
    BotUser.objects.filter(user_id=user.id).delete()

    _assert_refused(send(), 404, "not_found", texts.verify_error_no_user())
    assert BotUser.objects.filter(user_id=user.id).exists() is False


def test_a_banned_user_is_forbidden(send, telegram, user, turnstile):
    user_ban(bot_id=telegram.bot.id, user_id=user.id)

    _assert_refused(send(), 403, "forbidden", texts.verify_error_banned())
    assert user_row(telegram, user).is_verified is False
    assert turnstile.siteverify_requests() == []


def test_a_ban_then_unban_voids_the_old_request(send, webhook, telegram, user, admin):
    row = user_row(telegram, user)
    user_ban(bot_id=telegram.bot.id, user_id=user.id)
    BotUser.objects.filter(pk=row.pk).update(is_banned=False)  # /unban restores nothing

    _assert_refused(send(), 409, "conflict", texts.verify_error_link_superseded())


def test_an_already_verified_user_is_a_conflict(send, telegram, user, turnstile):
    assert send().status_code == 200

    _assert_refused(send(), 409, "conflict", texts.verify_error_already_verified())
    assert len(turnstile.siteverify_requests()) == 1


def test_another_users_request_is_forbidden(
    webhook, send, telegram, turnstile, pending, clock, client
):
    vera = telegram.user(8103, "Vera")
    webhook.deliver_ok(telegram.private_message(vera, text="hello"))
    vera_link = latest_link(telegram, vera)
    before = table_state()

    # Vera's page, Tess's request id.
    response = submit(
        client,
        request_id=pending.request_id,
        init_data=init_data_for(telegram, vera, clock.now),
        token=turnstile.issue_token(cdata=pending.request_id, hostname=HOSTNAME),
    )

    _assert_refused(response, 403, "forbidden", texts.verify_error_other_account())
    assert table_state() == before
    assert vera_link.request_id != pending.request_id


def test_a_superseded_request_is_a_conflict(
    send, webhook, telegram, turnstile, user, clock, pending
):
    clock.advance(seconds=61)  # the notice slot allows a new challenge
    webhook.deliver_ok(telegram.private_message(user, text="again"))
    newer = latest_link(telegram, user)
    assert newer.request_id != pending.request_id

    _assert_refused(send(), 409, "conflict", texts.verify_error_link_superseded())
    assert turnstile.siteverify_requests() == []
    token = turnstile.issue_token(cdata=newer.request_id, hostname=HOSTNAME)
    assert send(request_id=newer.request_id, token=token).status_code == 200


def test_a_request_of_an_older_generation_is_a_conflict(send, telegram, user):
    # A mode change bumps the generation and clears every pending challenge; a row the clearing
    # missed (a race) still carries the old generation and must not complete.
    set_switches(verify_generation="5")

    _assert_refused(send(), 409, "conflict", texts.verify_error_link_superseded())
    assert user_row(telegram, user).is_verified is False


@pytest.mark.parametrize(("seconds", "status"), [(599, 200), (600, 410)])
def test_a_request_expires_600_seconds_after_issue(seconds, status, send, clock, telegram, user):
    clock.advance(seconds=seconds)

    response = send()

    assert response.status_code == status
    if status == 410:
        assert response.json() == error_body("expired", texts.verify_error_link_expired())
    assert user_row(telegram, user).is_verified is (status == 200)
