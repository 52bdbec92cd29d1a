"""The web process's own connection and header limits (config/http_protocol.py), attacked over
raw sockets against ``config.run web`` as ``make run`` starts it: slow and idle headers, huge
headers, stalled bodies, more connections than a worker keeps."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import requests

from tests.web_process import WebProcess, read_until_closed, status_of

pytestmark = pytest.mark.subprocess

HEADER_TIMEOUT_SECONDS = 2
# How late past its bound a close may come on a loaded 2-core machine (timer, scheduling).
CLOSE_MARGIN_SECONDS = 3
PARTIAL_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"
WEBHOOK_HEAD = (
    b"POST /telegram/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
)


@pytest.fixture
def started(transactional_db, tmp_path):
    processes: list[WebProcess] = []

    def start(**variables: str) -> WebProcess:
        processes.append(WebProcess(tmp_path, **variables))
        return processes[-1]

    yield start
    for process in processes:
        process.stop()


def _closed_at(connection: socket.socket, results: dict, key: int) -> None:
    """Record when the server closed ``connection`` and what it had sent."""
    try:
        answer = read_until_closed(connection)
    except TimeoutError:
        answer = None
    results[key] = (time.monotonic(), answer)


def test_slow_and_idle_header_sockets_are_closed_within_the_bound_while_healthz_answers(started):
    web = started(
        WEB_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT_SECONDS), WEB_KEEP_ALIVE_SECONDS="2"
    )
    silent = [web.connect(timeout=20) for _ in range(150)]
    dripping = [web.connect(timeout=20) for _ in range(150)]
    opened_at = time.monotonic()
    for connection in dripping:
        connection.sendall(PARTIAL_REQUEST)
    keep_alive = web.connect(timeout=20)
    keep_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert keep_alive.recv(4096).startswith(b"HTTP/1.1 204 ")
    answered_at = time.monotonic()
    results: dict[int, tuple[float, bytes | None]] = {}
    watchers = [
        threading.Thread(target=_closed_at, args=(connection, results, index))
        for index, connection in enumerate([*silent, *dripping, keep_alive])
    ]
    for watcher in watchers:
        watcher.start()
    # While 300 sockets hold their headers back, the process answers as usual — and a
    # dripping socket's activity does not extend its bound.
    time.sleep(1)
    assert web.healthz_status() == 204
    for connection in dripping:
        connection.sendall(b"a")
    assert web.healthz_status() == 204
    for watcher in watchers:
        watcher.join(30)

    bound = opened_at + HEADER_TIMEOUT_SECONDS + CLOSE_MARGIN_SECONDS
    silent_results = [results[index] for index in range(150)]
    dripping_results = [results[index] for index in range(150, 300)]
    assert all(answer == b"" and closed <= bound for closed, answer in silent_results)
    assert all(
        status_of(answer) == 408 and closed <= bound for closed, answer in dripping_results
    ), dripping_results[:3]
    # The idle keep-alive connection: closed WEB_KEEP_ALIVE_SECONDS after its answer.
    keep_alive_closed, keep_alive_rest = results[300]
    assert keep_alive_rest == b""
    assert keep_alive_closed <= answered_at + 2 + CLOSE_MARGIN_SECONDS
    assert web.healthz_status() == 204
    for connection in [*silent, *dripping, keep_alive]:
        connection.close()


def _raw_request(web: WebProcess, data: bytes) -> bytes:
    with web.connect() as connection:
        # The server may answer and close before it has all of it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(data)
        return read_until_closed(connection)


def test_a_1_mib_header_is_refused_with_431_before_it_is_all_read(started):
    web = started()
    one_header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1024 * 1024)

    answer = _raw_request(web, one_header)  # never finished: refused at the 64 KiB cap

    assert status_of(answer) == 431
    assert answer.endswith(b"Request header fields too large.")
    assert b"connection: close" in answer


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param(b"X-Big: " + b"a" * (17 * 1024) + b"\r\n", 431, id="one-17KiB-line"),
        pytest.param(
            b"".join(b"X-Part-%d: " % n + b"a" * (7 * 1024) + b"\r\n" for n in range(10)),
            431,
            id="70KiB-of-7KiB-lines",
        ),
        pytest.param(b"X-Big: " + b"a" * (15 * 1024) + b"\r\n", 204, id="one-15KiB-line-passes"),
    ],
)
def test_the_header_block_and_line_caps(started, headers, status):
    web = started()

    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    answer = _raw_request(web, head + headers + b"\r\n")

    assert status_of(answer) == status


def test_a_body_arriving_with_its_headers_is_not_counted_as_header_bytes(started):
    """A 500 KB body sent in one write with its headers (the first read holds both) is read as
    a body: the webhook answers its wrong secret, not 431."""
    web = started()

    response = requests.post(
        f"{web.url}/telegram/webhook",
        data=b'{"update_id": 1, "pad": "' + b"a" * 500_000 + b'"}',
        headers={"Content-Type": "application/json"},
        timeout=10,
    )

    assert response.status_code == 401


def test_a_stalled_body_is_cut_and_a_slow_one_is_not(started):
    web = started(WEB_BODY_IDLE_TIMEOUT_SECONDS="2")
    stalled = web.connect(timeout=20)
    stalled.sendall(WEBHOOK_HEAD + b'{"update_id": ')
    stalled_at = time.monotonic()
    slow = web.connect(timeout=20)
    slow.sendall(WEBHOOK_HEAD)
    body = b'{"update_id": 1, "pad": "' + b"a" * 973 + b'"}'
    assert len(body) == 1000
    results: dict[int, tuple[float, bytes | None]] = {}
    watcher = threading.Thread(target=_closed_at, args=(stalled, results, 0))
    watcher.start()
    for start in range(0, 1000, 125):  # 8 pieces over ~5.6 s, never 2 s apart
        slow.sendall(body[start : start + 125])
        time.sleep(0.7)
    slow_answer = slow.recv(4096)
    watcher.join(20)

    closed_at, stalled_answer = results[0]
    assert stalled_answer == b""  # the application saw the client leave; nothing answered
    assert closed_at <= stalled_at + 2 + 1 + CLOSE_MARGIN_SECONDS  # idle bound + the sweep
    assert status_of(slow_answer) == 401  # read whole, then refused for its missing secret
    stalled.close()
    slow.close()


def test_at_the_connection_cap_idle_connections_make_room_and_busy_ones_are_kept(started):
    web = started(WEB_MAX_CONNECTIONS_PER_WORKER="10")
    idle = [web.connect() for _ in range(10)]
    time.sleep(0.5)

    # A real client still gets through: the longest-idle connection made room for it.
    assert web.healthz_status() == 204
    idle[0].settimeout(5)
    assert read_until_closed(idle[0]) == b""

    # Ten requests in progress (bodies not sent yet) take every place, the idle ones leave.
    time.sleep(0.5)  # the health check's connection closed
    busy = []
    for _ in range(10):
        busy.append(web.connect())
        busy[-1].sendall(WEBHOOK_HEAD)
        time.sleep(0.05)
    time.sleep(0.5)
    for connection in idle[1:]:
        connection.settimeout(5)
        assert read_until_closed(connection) == b""

    # Now nothing can make room: a new connection is answered 503 and closed at once.
    with web.connect(timeout=5) as refused:
        answer = read_until_closed(refused)
    assert status_of(answer) == 503
    assert answer.endswith(b"Too many connections; try again shortly.")

    # The requests in progress were kept: each one finished is answered.
    body = b'{"update_id": 1, "pad": "' + b"a" * 973 + b'"}'
    for connection in busy:
        connection.settimeout(10)
        connection.sendall(body)
        assert status_of(connection.recv(4096)) == 401
        connection.close()
    assert web.healthz_status() == 204
    assert "connection refused: the worker is at its connection cap" in web.log()
    for connection in idle:
        connection.close()
