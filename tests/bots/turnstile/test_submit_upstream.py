"""The submit API from the throttle on (spec §5.5 steps 6–10): the 15 s window, Siteverify's
outcomes, initData re-validated after it, the final conditional UPDATE, concurrent submits."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client

from bots import texts
from bots.services.settings import verification_setting_change
from bots.services.users import user_ban
from tests.bots.conftest import PUBLIC_BASE_URL
from tests.bots.helpers import user_row
from tests.bots.turnstile.helpers import HOSTNAME, error_body, init_data_for, submit

SUBMIT_WINDOW = timedelta(seconds=15)


def _token(turnstile, pending, **context) -> str:
    return turnstile.issue_token(cdata=pending.request_id, hostname=HOSTNAME, **context)


# ------------------------------------------------------------------ 6. the throttle


def test_the_submit_window_is_15_seconds_with_retry_after(send, turnstile, telegram, user, clock):
    turnstile.reject_next("invalid-input-response")
    assert send().status_code == 422
    assert user_row(telegram, user).verify_submit_not_before == clock.now + SUBMIT_WINDOW

    waits = []
    for step in (0, 10, 4.5):
        clock.advance(seconds=step)
        response = send()
        assert response.status_code == 429
        waits.append(response["Retry-After"])
        assert response.json() == error_body(
            "too_many_requests", texts.verify_error_too_many_requests(int(response["Retry-After"]))
        )
    assert waits == ["15", "5", "1"]
    assert len(turnstile.siteverify_requests()) == 1  # no upstream call while throttled

    clock.advance(seconds=0.5)  # exactly when the window ends
    assert send().status_code == 200
    assert len(turnstile.siteverify_requests()) == 2


# ------------------------------------------------------------------ 7. Siteverify


@pytest.mark.parametrize(
    ("mode", "status"),
    [("status", 500), ("status", 502), ("disconnect", 500), ("not_json", 200),
     ("internal_error", 200)],
)  # fmt: skip
def test_a_transient_siteverify_failure_is_retried_once_with_the_same_key(
    mode, status, send, turnstile, telegram, user
):
    turnstile.fail_siteverify(mode, status=status, times=1)

    assert send().status_code == 200
    first, retry = turnstile.siteverify_requests()
    assert first.json() == retry.json()  # same token, secret and idempotency key
    assert user_row(telegram, user).is_verified is True


@pytest.mark.parametrize(
    ("mode", "status"), [("status", 500), ("disconnect", 500), ("internal_error", 200)]
)
def test_siteverify_still_failing_after_the_retry_is_unavailable_and_keeps_the_window(
    mode, status, send, turnstile, telegram, user, clock
):
    turnstile.fail_siteverify(mode, status=status, times=2)

    response = send()

    assert (response.status_code, response.json()) == (
        503,
        error_body("unavailable", texts.verify_error_unavailable()),
    )
    assert len(turnstile.siteverify_requests()) == 2
    row = user_row(telegram, user)
    assert (row.is_verified, row.verify_submit_not_before) == (False, clock.now + SUBMIT_WINDOW)
    assert send().status_code == 429  # the window stays: no second upstream call
    assert len(turnstile.siteverify_requests()) == 2


@pytest.mark.parametrize(("mode", "status"), [("status", 400), ("status", 403), ("malformed", 200)])
def test_a_non_transient_siteverify_failure_is_unavailable_without_a_retry(
    mode, status, send, turnstile, telegram, user
):
    turnstile.fail_siteverify(mode, status=status, times=2)

    assert send().status_code == 503
    assert len(turnstile.siteverify_requests()) == 1
    assert user_row(telegram, user).is_verified is False


def test_a_rejected_token_is_422(send, turnstile, telegram, user):
    turnstile.reject_next("invalid-input-response")

    response = send()

    assert (response.status_code, response.json()) == (
        422,
        error_body("token_rejected", texts.verify_error_token_rejected()),
    )
    assert user_row(telegram, user).is_verified is False


def test_a_spent_token_is_rejected(send, turnstile, pending, telegram, user, clock):
    token = _token(turnstile, pending)
    turnstile.reject_next("invalid-input-response")
    send(token=token)  # spends it
    clock.advance(seconds=15)

    assert send(token=token).status_code == 422
    assert turnstile.siteverify_requests()[-1].json()["response"] == token


@pytest.mark.parametrize(
    "context",
    [{"hostname": "evil.example"}, {"action": "login"}, {"cdata": "0" * 64}],
    ids=["hostname", "action", "cdata"],
)
def test_a_token_of_another_context_is_rejected(context, send, turnstile, pending, telegram, user):
    fields = {"cdata": pending.request_id, "hostname": HOSTNAME, **context}
    token = turnstile.issue_token(**fields)

    response = send(token=token)

    assert response.json() == error_body("token_rejected", texts.verify_error_token_rejected())
    assert user_row(telegram, user).is_verified is False


def test_without_public_base_url_the_request_origin_and_hostname_are_expected(
    send, turnstile_settings, turnstile, pending, clock
):
    turnstile_settings.PUBLIC_BASE_URL = None

    assert send(origin=PUBLIC_BASE_URL).status_code == 403
    assert send(origin="http://testserver").status_code == 422  # a token of support.example.com
    clock.advance(seconds=15)
    page_token = turnstile.issue_token(cdata=pending.request_id, hostname="testserver")
    assert send(origin="http://testserver", token=page_token).status_code == 200


def test_siteverify_refusing_the_secret_is_unavailable_not_a_bad_token(
    send, turnstile_settings, telegram, user, caplog
):
    turnstile_settings.TURNSTILE_SECRET_KEY = "0x4AAAAAAA-a-stale-secret"

    with caplog.at_level(logging.INFO):
        response = send()

    assert response.status_code == 503
    assert "siteverify refused TURNSTILE_SECRET_KEY (invalid-input-secret)" in caplog.text
    assert "0x4AAAAAAA-a-stale-secret" not in caplog.text
    assert user_row(telegram, user).is_verified is False


# ------------------------------------------------------------------ 8. and 9., while in flight


def _submit_in_thread(results: dict, name: str, **fields) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = submit(Client(), **fields)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _fresh_submit(turnstile, pending, telegram, user, clock):
    """Tess's page submitting now (fresh initData, a new token), from the test's thread."""
    return submit(
        Client(),
        request_id=pending.request_id,
        init_data=init_data_for(telegram, user, clock.now),
        token=_token(turnstile, pending),
    )


def _in_flight(turnstile, pending, telegram, user, clock, *, during) -> tuple:
    """Submit while Siteverify is held; run ``during()`` meanwhile. (The submit's response,
    what ``during`` returned.)"""
    hold = turnstile.hold_siteverify()
    results: dict = {}
    thread = _submit_in_thread(
        results,
        "submit",
        request_id=pending.request_id,
        init_data=init_data_for(telegram, user, clock.now),
        token=_token(turnstile, pending),
    )
    try:
        assert hold.wait_until_arrived(10), "the submit never reached Siteverify"
        meanwhile = during()
    finally:
        hold.release()
        thread.join(30)
    return results["submit"], meanwhile


@pytest.mark.django_db(transaction=True)
def test_init_data_gone_stale_during_siteverify_is_unauthorized(
    pending, turnstile, telegram, user, clock
):
    response, _ = _in_flight(
        turnstile, pending, telegram, user, clock, during=lambda: clock.advance(seconds=301)
    )

    assert response.json() == error_body("unauthorized", texts.verify_error_identity())
    assert user_row(telegram, user).is_verified is False


@pytest.mark.django_db(transaction=True)
def test_a_request_expiring_during_siteverify_is_gone(pending, turnstile, telegram, user, clock):
    clock.advance(seconds=590)

    response, _ = _in_flight(
        turnstile, pending, telegram, user, clock, during=lambda: clock.advance(seconds=15)
    )

    assert response.json() == error_body("expired", texts.verify_error_link_expired())
    assert user_row(telegram, user).is_verified is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["ban", "mode switch"])
def test_a_ban_or_switch_during_siteverify_loses_the_final_update(
    change, pending, turnstile, telegram, user, clock
):
    def meanwhile() -> None:
        if change == "ban":
            user_ban(bot_id=telegram.bot.id, user_id=user.id)
        else:
            verification_setting_change(bot_id=telegram.bot.id, key="verify_mode", value="math")

    response, _ = _in_flight(turnstile, pending, telegram, user, clock, during=meanwhile)

    assert response.json() == error_body("conflict", texts.verify_error_link_superseded())
    assert user_row(telegram, user).is_verified is False


# ------------------------------------------------------------------ concurrent submits


@pytest.mark.django_db(transaction=True)
def test_a_second_submit_while_the_first_is_in_siteverify_is_throttled(
    pending, turnstile, telegram, user, clock
):
    first, second = _in_flight(
        turnstile,
        pending,
        telegram,
        user,
        clock,
        during=lambda: _fresh_submit(turnstile, pending, telegram, user, clock),
    )

    assert (first.status_code, second.status_code) == (200, 429)
    assert second["Retry-After"] == "15"
    assert len(turnstile.siteverify_requests()) == 1
    assert user_row(telegram, user).is_verified is True


@pytest.mark.django_db(transaction=True)
def test_a_submit_of_a_later_window_wins_over_one_still_in_siteverify(
    pending, turnstile, telegram, user, clock
):
    """The first submit hangs in Siteverify past its window; a second claims a new window and
    verifies; the first's final UPDATE then finds the window it claimed gone: 409."""

    def later_submit():
        clock.advance(seconds=15)
        return _fresh_submit(turnstile, pending, telegram, user, clock)

    first, second = _in_flight(turnstile, pending, telegram, user, clock, during=later_submit)

    assert (second.status_code, first.status_code) == (200, 409)
    assert user_row(telegram, user).verified_at == clock.now


@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_submits_verify_exactly_once(pending, turnstile, telegram, user, clock):
    start = threading.Barrier(2)
    results: dict = {}

    def run(name: str, token: str, init_data: str) -> None:
        try:
            start.wait(10)
            results[name] = submit(
                Client(), request_id=pending.request_id, init_data=init_data, token=token
            )
        finally:
            connections.close_all()

    threads = [
        threading.Thread(
            target=run,
            args=(name, _token(turnstile, pending), init_data_for(telegram, user, clock.now)),
        )
        for name in ("a", "b")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    statuses = sorted(response.status_code for response in results.values())
    assert statuses in ([200, 409], [200, 429])
    assert len(turnstile.siteverify_requests()) == 1
    assert user_row(telegram, user).is_verified is True


# ------------------------------------------------------------------ secrets stay out of logs


def test_no_secret_token_or_init_data_reaches_the_log(
    send, turnstile, pending, telegram, user, clock, caplog
):
    token = _token(turnstile, pending)
    init_data = init_data_for(telegram, user, clock.now)
    turnstile.reject_next("invalid-input-response")
    turnstile.fail_siteverify("status", status=500, times=2)

    with caplog.at_level(logging.DEBUG):
        send(token=token, init_data=init_data)  # 503 after the retry
        clock.advance(seconds=15)
        send(token=token, init_data=init_data_for(telegram, user, clock.now))  # 422
        clock.advance(seconds=15)
        assert send().status_code == 200

    for secret in (turnstile.secret_key, token, init_data, telegram.token):
        assert secret not in caplog.text
    assert "user 8101 verified through turnstile" in caplog.text
