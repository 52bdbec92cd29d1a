"""Finding 3: the admin log-in is throttled in Redis for every worker and both surfaces (5
failures in 15 minutes per client IP or username → 15-minute lock), Argon2 runs at most
LOGIN_CONCURRENT_HASHES at a time per process, and unknown usernames cost no hash at all."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime

import pytest
import requests
from django.contrib.auth.hashers import Argon2PasswordHasher
from django.db import connection
from django.utils import timezone

from proxy.models import AdminLoginEvent
from proxy.runtime_state.login_throttle import (
    LoginSubjects,
    login_attempt_begin,
    login_attempt_failed,
    login_attempt_succeeded,
)
from proxy.services.admin_login import LoginOutcome, admin_login_attempt
from proxy.services.admin_users import admin_user_create_default
from tests.proxy.conftest import UvicornProcess

PASSWORD = "correct horse battery staple"
_CSRF = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')


class CountingArgon2Hasher(Argon2PasswordHasher):
    """The real Argon2 hasher, counting how many checks run and how many at once."""

    lock = threading.Lock()
    calls = 0
    in_flight = 0
    most_in_flight = 0

    @classmethod
    def reset(cls) -> None:
        cls.calls = cls.in_flight = cls.most_in_flight = 0

    def verify(self, password, encoded):
        cls = type(self)
        with cls.lock:
            cls.calls += 1
            cls.in_flight += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            return super().verify(password, encoded)
        finally:
            with cls.lock:
                cls.in_flight -= 1

    def encode(self, password, salt):
        with type(self).lock:
            type(self).calls += 1
        return super().encode(password, salt)


def _log_in(base: str, username: str, password: str, **headers: str) -> requests.Response:
    """One browser log-in at ``base``: the page (CSRF cookie + token), then the form."""
    session = requests.Session()
    page = session.get(f"{base}/admin/login/", headers=headers, timeout=30)
    token = _CSRF.search(page.content).group(1).decode()
    return session.post(
        f"{base}/admin/login/?next=/admin/",
        data={"csrfmiddlewaretoken": token, "username": username, "password": password},
        headers={"Referer": f"{base}/admin/login/", **headers},
        allow_redirects=False,
        timeout=60,
    )


@pytest.fixture
def two_web_processes(upstream, transactional_db):
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    processes = [UvicornProcess(upstream.url, TRUSTED_PROXIES="127.0.0.1") for _ in range(2)]
    yield processes
    for process in processes:
        process.stop()


@pytest.mark.subprocess
def test_the_sixth_login_attempt_is_refused_across_two_worker_processes(
    two_web_processes, settings
):
    first, second = (process.url for process in two_web_processes)
    attacker = {"X-Forwarded-For": "198.51.100.20"}
    answers = [
        _log_in((first, second)[attempt % 2], "admin", f"guess number {attempt}", **attacker)
        for attempt in range(5)
    ]
    assert [answer.status_code for answer in answers] == [200] * 5
    assert all(b"Please enter the correct" in answer.content for answer in answers)

    # The sixth attempt, on the other process, with the right password: refused unchecked.
    sixth = _log_in(second, "admin", PASSWORD, **attacker)

    assert sixth.status_code == 429
    assert b"Too many failed log-in attempts" in sixth.content
    assert int(sixth.headers["Retry-After"]) > 14 * 60
    assert "cpr_admin_session" not in sixth.cookies
    # The username is locked too: another address gets no further with it ...
    elsewhere = _log_in(first, "admin", PASSWORD, **{"X-Forwarded-For": "203.0.113.5"})
    assert elsewhere.status_code == 429
    # ... while the locked address is refused whatever username it tries.
    other_name = _log_in(first, "someone", "whatever it is", **attacker)
    assert other_name.status_code == 429
    # Knocking on during the lock does not lengthen it.
    assert int(other_name.headers["Retry-After"]) <= int(sixth.headers["Retry-After"])
    events = list(
        AdminLoginEvent.objects.order_by("created_at", "id").values_list(
            "outcome", "reason", "locked_out", "client_ip"
        )
    )
    attacker_ip = "198.51.100.20"
    assert events == [
        *[("failure", "wrong_password", False, attacker_ip)] * 4,
        ("failure", "wrong_password", True, attacker_ip),  # this one set the lock
        # ... and each attempt the lock refused is a row too (the password never checked).
        ("failure", "locked", True, attacker_ip),
        ("failure", "locked", True, "203.0.113.5"),
        ("failure", "locked", True, attacker_ip),
    ]


def _api_log_in(base: str, password: str, **headers: str) -> requests.Response:
    return requests.post(
        f"{base}/api/admin/login",
        json={"username": "admin", "password": password},
        headers=headers,
        timeout=60,
    )


@pytest.mark.subprocess
def test_admin_api_log_ins_share_the_limit_across_processes_and_with_the_form(
    two_web_processes,
):
    """The admin API (which landed after the review) is the same door: failures on it in one
    worker lock the next attempt out in another, on the API and on the Django admin's form."""
    first, second = (process.url for process in two_web_processes)
    attacker = {"X-Forwarded-For": "198.51.100.21"}
    answers = [
        _api_log_in((first, second)[attempt % 2], f"api guess {attempt}", **attacker)
        for attempt in range(4)
    ]
    # The fifth failure comes through the Django admin's form.
    answers.append(_log_in(second, "admin", "form guess", **attacker))
    assert [answer.status_code for answer in answers] == [401] * 4 + [200]
    assert {answer.json()["code"] for answer in answers[:4]} == {40102}

    sixth = _api_log_in(first, PASSWORD, **attacker)

    assert sixth.status_code == 429
    assert sixth.json() == {
        "code": 42901,
        "message": "Too many failed log-in attempts; try again later",
        "data": None,
    }
    assert int(sixth.headers["Retry-After"]) > 14 * 60
    assert "cpr_admin_session" not in sixth.cookies
    assert _log_in(second, "admin", PASSWORD, **attacker).status_code == 429
    surfaces = list(
        AdminLoginEvent.objects.order_by("created_at", "id").values_list(
            "surface", "reason", "locked_out"
        )
    )
    assert surfaces == [
        *[("api", "wrong_password", False)] * 4,
        ("admin", "wrong_password", True),
        # the refused attempts on each surface, after the lock
        ("api", "locked", True),
        ("admin", "locked", True),
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_log_ins_run_at_most_the_cap_of_hashes_at_once(settings):
    settings.PASSWORD_HASHERS = [f"{__name__}.CountingArgon2Hasher"]
    settings.LOGIN_FAILURE_LIMIT = 100  # this test is about the hash cap, not the lock-out
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    CountingArgon2Hasher.reset()
    start = threading.Barrier(6)
    outcomes: list[LoginOutcome] = []

    def attempt(index: int) -> None:
        start.wait()
        try:
            result = admin_login_attempt(
                username="admin",
                password=f"wrong password {index}",
                client_ip=f"198.51.100.{index}",
                user_agent=None,
                surface="admin",
                now=timezone.now(),
            )
            outcomes.append(result.outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes == [LoginOutcome.INVALID] * 6
    assert CountingArgon2Hasher.calls == 6
    assert CountingArgon2Hasher.most_in_flight <= settings.LOGIN_CONCURRENT_HASHES == 2


@pytest.mark.django_db
def test_unknown_usernames_cost_no_password_hash(settings):
    settings.PASSWORD_HASHERS = [f"{__name__}.CountingArgon2Hasher"]
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    CountingArgon2Hasher.reset()

    results = [
        admin_login_attempt(
            username=f"user{index}",
            password=PASSWORD,
            client_ip=f"203.0.113.{index}",
            user_agent="curl/8",
            surface="admin",
            now=timezone.now(),
        )
        for index in range(6)
    ]

    assert [result.outcome for result in results] == [LoginOutcome.INVALID] * 6
    assert CountingArgon2Hasher.calls == 0
    assert list(AdminLoginEvent.objects.values_list("reason", flat=True).distinct()) == [
        "unknown_username"
    ]
    assert not AdminLoginEvent.objects.filter(user_agent__isnull=True).exists()


def test_the_lock_lasts_the_lockout_and_a_success_clears_the_counts(redis_client, settings):
    subjects = LoginSubjects(client_ip="192.0.2.44", username=f"probe-{timezone.now().timestamp()}")
    for _ in range(4):
        assert login_attempt_begin(subjects) == 0
        assert login_attempt_failed(subjects) == 0
    assert login_attempt_begin(subjects) == 0
    login_attempt_succeeded(subjects)  # the right password on the 5th: the counts start again

    for attempt in range(5):
        assert login_attempt_begin(subjects) == 0
        locked_for = login_attempt_failed(subjects)
        assert locked_for == (settings.LOGIN_LOCKOUT_SECONDS * 1000 if attempt == 4 else 0)

    wait_ms = login_attempt_begin(subjects)
    assert (
        settings.LOGIN_LOCKOUT_SECONDS * 1000 - 5000
        < wait_ms
        <= settings.LOGIN_LOCKOUT_SECONDS * 1000
    )
    ip_lock = f"{settings.REDIS_KEY_PREFIX}login:lock:ip:192.0.2.44"
    assert 0 < redis_client.pttl(ip_lock) <= settings.LOGIN_LOCKOUT_SECONDS * 1000
    # The username never appears in a key name (it might be a mistyped password).
    assert not list(redis_client.scan_iter(match=f"*{subjects.username}*"))


def test_attempts_in_flight_count_against_the_limit(settings):
    subjects = LoginSubjects(
        client_ip="192.0.2.45", username=f"flight-{timezone.now().timestamp()}"
    )
    started = [login_attempt_begin(subjects) for _ in range(6)]

    assert started[:5] == [0] * 5
    assert started[5] > 0  # a sixth concurrent attempt does not reach the password check
