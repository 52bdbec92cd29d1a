"""CVE-2024-7592 (CPython's quadratic cookie unquoting, on this machine's Python 3.11.7): a
``Cookie`` full of backslash escapes is answered at once on every route of the real web
process (config/cookie_safety.py, and the header caps of config/http_protocol.py)."""

from __future__ import annotations

import time

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from config.cookie_safety import cpython_unquote, linear_unquote
from tests.web_process import WebProcess

# Routes that parse cookies (the admin's session and CSRF cookies), and the others.
ROUTES = [
    ("get", "/admin/login/"),
    ("get", "/api/admin/auth/status"),
    ("post", "/api/admin/auth/login"),
    ("post", "/telegram/webhook"),
    ("get", "/v1/models"),
]
# "a=\"\1\1…\"": CPython 3.11.7 spends O(n²) on such a value; its bound here is correctness,
# not speed: the quadratic parse of the 60 KB one takes several seconds here idle, 27 s at a
# load of 9, where a safe answer took up to 1.5 s (a 1 s bound failed there). 5 s tells the
# two apart on a loaded machine.
ANSWER_WITHIN_SECONDS = 5.0


def _bomb(length: int) -> str:
    return 'a="' + "\\1" * (length // 2) + '"'


@pytest.fixture
def web(transactional_db, tmp_path):
    # One header line may be 64 KiB here, so that the parser itself meets the whole bomb.
    process = WebProcess(tmp_path, WEB_MAX_HEADER_FIELD_BYTES=str(64 * 1024))
    yield process
    process.stop()


@pytest.mark.subprocess
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_60_kb_cookie_bomb_is_answered_at_once(web, method, path):
    started = time.monotonic()
    response = requests.request(
        method, f"{web.url}{path}", headers={"Cookie": _bomb(60_000)}, timeout=30
    )
    took = time.monotonic() - started

    assert response.status_code < 500
    assert took < ANSWER_WITHIN_SECONDS, f"{path} took {took:.2f} s"


@pytest.mark.subprocess
def test_at_the_default_caps_an_80_kb_bomb_is_431_and_four_16_kb_ones_are_parsed_at_once(
    transactional_db, tmp_path
):
    web = WebProcess(tmp_path)
    try:
        started = time.monotonic()
        whole = requests.get(
            f"{web.url}/admin/login/", headers={"Cookie": _bomb(80_000)}, timeout=30
        )
        assert whole.status_code == 431
        # Four Cookie lines within every cap: Django joins them and unquotes each value.
        cookie_lines = "".join(
            f"Cookie: {_bomb(15_000).replace('a=', f'c{n}=')}\r\n" for n in range(4)
        )
        answer = _raw_get(web, "/admin/login/", cookie_lines)
        took = time.monotonic() - started
    finally:
        web.stop()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert took < ANSWER_WITHIN_SECONDS


def _raw_get(web: WebProcess, path: str, extra_headers: str) -> bytes:
    with web.connect(timeout=30) as connection:
        connection.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"{extra_headers}\r\n".encode("latin-1")
        )
        received = bytearray()
        while chunk := connection.recv(65536):
            received += chunk
    return bytes(received)


@given(st.text(alphabet='\\"01234567abn\n;', max_size=40))
def test_the_linear_unquote_reads_every_value_as_cpython_does(text):
    for value in (text, f'"{text}"'):
        assert linear_unquote(value) == cpython_unquote(value)
