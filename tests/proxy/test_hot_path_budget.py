"""The request path's budget (issue 9, issue 16, issue 23): before the first byte PostgreSQL
sees one statement (the client key, its policy and the pool snapshot's version; the settings,
fingerprint and candidates come from the snapshot in memory, read again — one more statement —
only after the pool changed) and Redis one call: the script that looks up the conversation's
affinity, orders the candidates and acquires a slot. After the stream: one call to release the slot
and the affinity record's one script call. The ledger is written later, in batches.

Both are counted where the servers see them, whatever client API sent them (execute, cursors,
pipelines, COPY, scripts): the request path's connections reach PostgreSQL through a relay that
notes every statement, and a private Redis reports every command clients send it (MONITOR).
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import warnings
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

import pytest
import redis
import requests
from django.test import override_settings
from django.utils import timezone

from config.embedded import free_port
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.key_policies import PolicyValues, key_policy_set
from proxy.services.runtime_settings import runtime_settings_ensure
from tests.fakes.codex import Reply
from tests.proxy.conftest import LiveServer, make_pool_account

# Start-up packets that are answered with one byte before the real start-up packet follows.
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _null_terminated(body: bytes, count: int) -> list[str]:
    return [part.decode() for part in body.split(b"\0", count)[:count]]


class PostgresStatementCounter:
    """A relay on a unix socket in front of the test's PostgreSQL that passes every byte on
    unchanged and notes each statement the server is asked to run: a simple query ('Q') or an
    execution ('E') of a parsed statement ('P', bound by 'B')."""

    def __init__(self, server: Mapping[str, str]) -> None:
        self._server = server
        self.statements: list[str] = []
        self.socket_dir = tempfile.mkdtemp(prefix="pgcount")  # short: unix paths are limited
        self.port = free_port()  # libpq's socket file name carries a port number
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(Path(self.socket_dir) / f".s.PGSQL.{self.port}"))
        self._listener.listen(16)
        threading.Thread(target=self._accept, daemon=True, name="pg-counter").start()

    def stop(self) -> None:
        self._listener.close()

    def _connect_to_server(self) -> socket.socket:
        host, port = self._server["HOST"], int(self._server["PORT"] or 5432)
        if host.startswith("/"):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(str(Path(host) / f".s.PGSQL.{port}"))
            return connection
        return socket.create_connection((host or "127.0.0.1", port))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server = self._connect_to_server()
        threading.Thread(target=self._copy, args=(server, client), daemon=True).start()
        try:
            self._relay_client_messages(client, server)
        except OSError:
            pass
        finally:
            client.close()
            server.close()

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass

    def _relay_client_messages(self, client: socket.socket, server: socket.socket) -> None:
        while True:  # start-up packets: a length, then a code; no type byte
            length = _receive_exactly(client, 4)
            if not length:
                return
            body = _receive_exactly(client, int.from_bytes(length, "big") - 4)
            server.sendall(length + body)
            if int.from_bytes(body[:4], "big") not in (_SSL_REQUEST, _GSSENC_REQUEST):
                break
        parsed: dict[str, str] = {}
        bound: dict[str, str] = {}
        while True:
            header = _receive_exactly(client, 5)
            if not header:
                return
            body = _receive_exactly(client, int.from_bytes(header[1:], "big") - 4)
            server.sendall(header + body)
            kind = header[:1]
            if kind == b"Q":
                self._note(body.rstrip(b"\0").decode())
            elif kind == b"P":
                name, query = _null_terminated(body, 2)
                parsed[name] = query
            elif kind == b"B":
                portal, statement = _null_terminated(body, 2)
                bound[portal] = parsed.get(statement, "")
            elif kind == b"E":
                [portal] = _null_terminated(body, 1)
                self._note(bound.get(portal, ""))
            elif kind == b"X":
                return

    def _note(self, sql: str) -> None:
        self.statements.append(" ".join(sql.split())[:60])


@pytest.fixture
def counted_proxy(private_redis, upstream, transactional_db, settings):
    """A proxy of its own whose request path reaches PostgreSQL through a statement counter
    and whose Redis is a private server (so every command on it is this test's)."""
    default = settings.DATABASES["default"]
    counter = PostgresStatementCounter(default)
    # Read when the server's loop opens its pool; Django's own connections keep the settings
    # they were made with (why Django warns about overriding DATABASES: here it is the point).
    through_counter = override_settings(
        DATABASES={
            **settings.DATABASES,
            "default": {**default, "HOST": counter.socket_dir, "PORT": str(counter.port)},
        }
    )
    settings.REDIS_URL = private_redis.url
    settings.CACHES = {
        **settings.CACHES,
        "default": {**settings.CACHES["default"], "LOCATION": private_redis.url},
    }
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    with warnings.catch_warnings(action="ignore", category=UserWarning):
        through_counter.enable()
    try:
        server = LiveServer()
        try:
            yield server, counter
            server.drain()
        finally:
            server.stop()
    finally:
        counter.stop()
        with warnings.catch_warnings(action="ignore", category=UserWarning):
            through_counter.disable()


class RedisCommandLog:
    """The commands clients send to a Redis server, as its MONITOR feed reports them (commands
    a Lua script runs inside the server are not round trips and are left out)."""

    _END = "hot-path-budget:end-of-log"

    def __init__(self, url: str) -> None:
        self._url = url
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()  # sends MONITOR
        self._received: list[dict] = []
        self._thread = threading.Thread(target=self._read, daemon=True, name="redis-monitor")
        self._thread.start()

    def _read(self) -> None:
        try:
            for command in self._monitor.listen():
                self._received.append(command)
                if command["command"] == f"ECHO {self._END}":
                    return
        except (redis.ConnectionError, OSError):
            pass

    _MARK = "hot-path-budget:mark"

    def mark(self) -> None:
        """A point in the log (the feed is in order): ``stop`` splits the commands there."""
        marker = redis.Redis.from_url(self._url)
        marker.echo(self._MARK)
        marker.close()

    def stop(self) -> list[str]:
        """End the log; returns the names of the commands clients sent, in order (a ``mark``
        shows as ``|``)."""
        marker = redis.Redis.from_url(self._url)
        marker.echo(self._END)  # the feed is in order: once this shows, all before it has
        marker.close()
        self._thread.join(10)
        self._monitor.__exit__()
        self._client.close()
        [marker_port] = {
            command["client_port"] for command in self._received if self._END in command["command"]
        }
        mark_ports = {
            command["client_port"] for command in self._received if self._MARK in command["command"]
        }
        return [
            "|" if self._MARK in command["command"] else command["command"].split(" ", 1)[0].upper()
            for command in self._received
            if command["client_type"] != "lua"
            and command["client_port"] != marker_port
            and (command["client_port"] not in mark_ports or self._MARK in command["command"])
        ]


def _counted_request(counted_proxy, private_redis, upstream, client_key):
    """One warmed-up request's statements before its first byte (key touches left out) and
    the Redis commands of the whole request (``|``: its first byte)."""
    server, postgres = counted_proxy
    make_pool_account("tok-a")
    make_pool_account("tok-b")

    def call(*, after_first_byte=lambda: None) -> None:
        with requests.post(
            f"{server.url}/v1/responses",
            data=json.dumps({"model": "gpt-5.4", "input": []}),
            headers={"Authorization": f"Bearer {client_key.key}"},
            timeout=30,
            stream=True,
        ) as response:
            assert response.status_code == 200
            chunks = response.iter_content(chunk_size=None)
            body = next(chunks)
            after_first_byte()
            body += b"".join(chunks)
        assert body.endswith(b"data: [DONE]\n\n")

    call()  # warms up: scripts loaded, connections opened, catalog cached
    server.drain()
    # That request's counters changed account_usage, so the pool snapshot's version moved: a
    # request for an unknown model (no account touched, nothing of the pool written) reads the
    # snapshot again, and the counted request finds it current.
    unknown = requests.post(
        f"{server.url}/v1/responses",
        data=json.dumps({"model": "no-such-model", "input": []}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )
    assert unknown.status_code == 404
    server.drain()
    # A stream that stays open after its first byte, so the first byte is a moment of its own.
    for token in ("tok-a", "tok-b"):
        upstream.program(token, Reply(deltas=4, delta_delay=0.2))
    postgres.statements.clear()
    redis_log = RedisCommandLog(private_redis.url)
    before_first_byte: list[str] = []

    def at_first_byte() -> None:
        before_first_byte.extend(postgres.statements)
        redis_log.mark()

    call(after_first_byte=at_first_byte)
    server.drain()
    redis_commands = redis_log.stop()

    hot_path = [
        statement
        for statement in before_first_byte
        if not statement.startswith("update client_api_keys")
    ]
    return hot_path, redis_commands


# The affinity record (seed §4B.3: SET EXAT, and per index ZADD, EXPIRE, prune) in one script
# call, written after the stream (with whatever other records accumulated meanwhile).
AFFINITY_RECORD = ["EVALSHA"]


def test_one_postgres_statement_and_one_redis_call_before_the_first_byte(
    counted_proxy, private_redis, upstream
):
    client_key = client_api_key_create(name="tests", now=timezone.now())

    hot_path, redis_commands = _counted_request(counted_proxy, private_redis, upstream, client_key)

    assert len(hot_path) == 1 and hot_path[0].startswith("select k.id")
    # Order-and-acquire (with the conversation's affinity lookup) | release, then the affinity
    # record.
    assert redis_commands == ["EVALSHA", "|", "EVALSHA", *AFFINITY_RECORD]


def test_a_key_policy_adds_one_redis_call_before_and_one_after(
    counted_proxy, private_redis, upstream
):
    """Issue 25: the policy row comes with the key (same statement); admission is one Lua
    call before scheduling, settlement one after the response; the spend of a budget is
    cached, so a warm request reads no usage rows."""
    client_key = client_api_key_create(name="tests", now=timezone.now())
    key_policy_set(
        key=client_key,
        values=PolicyValues(
            requests_per_minute=1000,
            tokens_per_minute=10**8,
            max_concurrent_requests=10,
            daily_budget_usd=Decimal("1000"),
            monthly_budget_usd=Decimal("10000"),
            allowed_models=["gpt-5.4"],
        ),
        now=timezone.now(),
    )

    hot_path, redis_commands = _counted_request(counted_proxy, private_redis, upstream, client_key)

    assert len(hot_path) == 1 and hot_path[0].startswith("select k.id")
    # Admit, order-and-acquire (with the affinity lookup) | then release, the settlement and
    # the affinity record, the last two written off the request's path in either order.
    first_byte = redis_commands.index("|")
    assert redis_commands[:first_byte] == ["EVALSHA", "EVALSHA"]
    assert sorted(redis_commands[first_byte + 1 :]) == sorted(
        ["EVALSHA", "EVALSHA", *AFFINITY_RECORD]
    )


def test_a_budget_without_a_list_of_models_costs_no_more_calls(
    counted_proxy, private_redis, upstream
):
    """A key with a budget and no ``allowed_models``: admitted from its headers, before its body
    names the model, it reserves the prior of the model its latest request named (the
    warm-up's, ``proxy/policies/recent_models.py``), so the dispatch takes the admission over
    without raising it — the same calls as above."""
    client_key = client_api_key_create(name="tests", now=timezone.now())
    key_policy_set(
        key=client_key,
        values=PolicyValues(daily_budget_usd=Decimal("1000")),
        now=timezone.now(),
    )

    hot_path, redis_commands = _counted_request(counted_proxy, private_redis, upstream, client_key)

    assert len(hot_path) == 1 and hot_path[0].startswith("select k.id")
    first_byte = redis_commands.index("|")
    assert redis_commands[:first_byte] == ["EVALSHA", "EVALSHA"]
    assert sorted(redis_commands[first_byte + 1 :]) == sorted(
        ["EVALSHA", "EVALSHA", *AFFINITY_RECORD]
    )


def test_a_change_to_the_pool_is_seen_by_the_next_request_for_one_more_statement(
    counted_proxy, upstream
):
    """The pool snapshot in memory is checked on every request (its version comes in the key's
    statement): after an operator's write the next request reads it again — one statement
    more — and schedules by the write; the request after it is back to one statement."""
    server, postgres = counted_proxy
    client_key = client_api_key_create(name="tests", now=timezone.now())
    first = make_pool_account("tok-a")
    make_pool_account("tok-b")

    def post(model: str = "gpt-5.4") -> requests.Response:
        return requests.post(
            f"{server.url}/v1/responses",
            data=json.dumps({"model": model, "input": [], "stream": False}),
            headers={"Authorization": f"Bearer {client_key.key}"},
            timeout=30,
        )

    def request_path_statements() -> list[str]:
        return [
            statement[:40]
            for statement in postgres.statements
            if statement.startswith(("select k.id", "select (select coalesce(sum(version)"))
        ]

    assert post().status_code == 200
    server.drain()
    assert post("no-such-model").status_code == 404  # reads the snapshot after the ledger
    server.drain()
    # An operator disables tok-a (the ORM, as the console does).
    type(first).objects.filter(pk=first.pk).update(status="disabled")
    postgres.statements.clear()
    after_the_change = [post() for _ in range(4)]
    statements_of_the_first = request_path_statements()[:2]
    server.drain()  # the ledger's counters of those four: the version moves again
    assert post("no-such-model").status_code == 404
    server.drain()
    postgres.statements.clear()
    assert post("no-such-model").status_code == 404
    unchanged = request_path_statements()

    assert [response.status_code for response in after_the_change] == [200] * 4
    assert upstream.tokens_called()[-4:] == ["tok-b"] * 4
    assert statements_of_the_first == [
        "select k.id, p.key_id, p.requests_per_mi",
        "select (select coalesce(sum(version), 0)",
    ]
    assert unchanged == ["select k.id, p.key_id, p.requests_per_mi"]
