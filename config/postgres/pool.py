"""Django's connection pool, handing out only connections the server has not closed.

After a failover, a restart or an idle-timeout kill, every idle pooled connection is dead.
psycopg_pool's own ``check`` callback (Django's ``CONN_HEALTH_CHECKS``) costs a round trip per
checkout and, worse, sleeps 1 s, 2 s, 4 s… after each failed check: with five dead connections
in the pool the next request waits past the acquire timeout and fails. Here a dead connection is
recognised without a round trip and replaced at once (the request path's async pool does the
same, ``proxy.loop_resources``; apps do not import config/, hence the twin).
"""

from __future__ import annotations

import select
import time

import psycopg
from psycopg.pq import ConnStatus
from psycopg_pool import ConnectionPool


def connection_is_alive(connection: psycopg.Connection) -> bool:
    """Whether an idle connection can still be used, at no round trip's cost: an idle
    connection has nothing to read, so a readable socket means the server has spoken since (a
    terminated backend sends its FATAL error and closes)."""
    if connection.closed or connection.broken or connection.pgconn.status != ConnStatus.OK:
        return False
    poller = select.poll()  # not select.select: file descriptors above 1023 are common here
    poller.register(connection.pgconn.socket, select.POLLIN)
    return not poller.poll(0)


class LiveConnectionPool(ConnectionPool):
    """A ``ConnectionPool`` whose ``getconn`` closes dead idle connections (the pool replaces
    them in the background) until it finds a live one or the acquire timeout passes."""

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            connection = super().getconn(timeout=max(0.001, deadline - time.monotonic()))
            try:
                alive = connection_is_alive(connection)
            except Exception:
                alive = False
            if alive:
                return connection
            connection.close()
            self.putconn(connection)
