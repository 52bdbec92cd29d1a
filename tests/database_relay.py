"""A TCP relay in front of the test run's PostgreSQL that a test can cut and restore, so a
project process sees the database become unreachable (connections reset, new ones refused)
and come back on the same address — as after a failover or a network outage."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config.embedded import database_url_for, free_port


class DatabaseRelay:
    """Listens on 127.0.0.1:``port`` and passes every byte to ``server`` (Django's HOST/PORT
    keys; a HOST starting with ``/`` is a unix socket folder)."""

    def __init__(self, server: Mapping[str, Any]) -> None:
        self._server = server
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
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
                target.sendall(data)
        except OSError:
            pass
        finally:
            for connection in (source, target):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
