"""Database faults for tests: killing connections the way a failover or an idle timeout does,
filling Django's pool with idle connections first, and a TCP relay in front of the test run's
PostgreSQL that a test can cut (connections reset, new ones refused), freeze (nothing passes,
as in a partition) and restore on the same address."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config.embedded import database_url_for, free_port, maintenance_connection


def terminate_connections(server: Mapping[str, Any], database: str) -> int:
    """pg_terminate_backend for every connection to ``database`` (the server stays up), once
    their backends have exited. Returns how many were killed."""
    with maintenance_connection(server) as admin:
        killed = admin.execute(
            "select coalesce(array_agg(pid) filter (where pg_terminate_backend(pid)), '{}')"
            " from pg_stat_activity where datname = %s",
            [database],
        ).fetchone()[0]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = admin.execute(
                "select count(*) from pg_stat_activity where pid = any(%s)", [killed]
            ).fetchone()[0]
            if alive == 0:
                break
            time.sleep(0.01)
    return len(killed)


def fill_django_pool(count: int) -> None:
    """Leave ``count`` idle connections in Django's pool: as many threads query at once, then
    give their connections back (what the end of a request does)."""
    from django.db import connection

    barrier = threading.Barrier(count)

    def hold() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("select 1")
                barrier.wait(10)  # all checked out at the same time: the pool grows
        finally:
            connection.close()

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)


class DatabaseRelay:
    """Listens on 127.0.0.1:``port`` and passes every byte to ``server`` (Django's HOST/PORT
    keys; a HOST starting with ``/`` is a unix socket folder)."""

    def __init__(self, server: Mapping[str, Any]) -> None:
        self._server = server
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        self.restore()

    def url(self, database: str) -> str:
        """The DATABASE_URL of ``database`` through this relay."""
        through = {**self._server, "HOST": "127.0.0.1", "PORT": str(self.port)}
        return database_url_for(through, database)

    def cut(self) -> None:
        """Reset every relayed connection and refuse new ones until ``restore``."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
        if listener is not None:
            listener.close()
        for connection in sockets:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def freeze(self) -> None:
        """Keep every connection open but pass nothing on (a partition, a hung server): what
        is sent waits in the relay until ``thaw``; new connections are accepted and hang."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = self._connect_to_server()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._sockets |= {client, server}
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._copy, args=(source, target), daemon=True).start()

    def _connect_to_server(self) -> socket.socket:
        host, port = self._server["HOST"], int(self._server["PORT"] or 5432)
        if host.startswith("/"):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(str(Path(host) / f".s.PGSQL.{port}"))
            return connection
        return socket.create_connection((host or "127.0.0.1", port))

    def _copy(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for connection in (source, target):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
