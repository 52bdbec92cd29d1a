"""Start the system's processes.

    python -m config.run all       migrate, ensure the admin, then web + worker + beat together
                                   in the foreground (one Ctrl-C stops all three) -- `make run`
    python -m config.run prepare   migrate and ensure the default admin, then exit
    python -m config.run web       uvicorn serving config.asgi (WEB_WORKERS processes)
    python -m config.run worker    Celery worker
    python -m config.run beat      Celery beat
    python -m config.run stop-embedded   stop the embedded PostgreSQL and Redis (data is kept)

web, worker and beat run the start-up checks (config.startup) first and refuse to start, with a
message saying why, when one fails. On SIGTERM each stops gracefully: web drains for up to
WEB_DRAIN_TIMEOUT_SECONDS (config/drain.py); the worker lets running jobs finish for up to
WORKER_DRAIN_TIMEOUT_SECONDS and hands the rest back to the queue; beat saves its schedule.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from config.run_messages import (
    READY_SIGNAL_DIRECTORY,
    local_base_url,
    not_ready,
    ready_banner,
    stopped_notice,
    stopping_notice,
)

PROCESSES = ("web", "worker", "beat")
# `all` waits this long beyond the longer drain for its children before killing them.
_SHUTDOWN_MARGIN_SECONDS = 5


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    from config.bootstrap import prepare

    # The children (uvicorn, celery) inherit what this publishes and start nothing themselves.
    prepare()

    django.setup()


def _refuse_or_continue(process: str) -> None:
    from django.db import connections

    from config.startup import StartupRefused, run_startup_checks

    try:
        run_startup_checks(process)
    except StartupRefused as refusal:
        print(f"{process}: refusing to start: {refusal}", file=sys.stderr)
        sys.exit(2)
    finally:
        # The child program (uvicorn workers, celery) opens its own connections.
        connections.close_all()


def _uvicorn_log_config() -> dict:
    from django.conf import settings

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"skip_healthz": {"()": "config.logging_filters.SkipHealthzAccessLog"}},
        "formatters": {
            "plain": {
                "class": "config.logging_filters.UtcFormatter",
                "format": "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
            }
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "filters": ["skip_healthz"],
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["console"], "level": settings.LOG_LEVEL, "propagate": False},
            # One line per request at INFO: LOG_LEVEL=warning (or higher) leaves them out.
            "uvicorn.access": {
                "handlers": ["console"],
                "level": settings.LOG_LEVEL,
                "propagate": False,
            },
        },
    }


def run_web() -> None:
    import uvicorn
    from django.conf import settings
    from uvicorn.supervisors import Multiprocess

    from config.drain import request_budget
    from config.http_protocol import GuardedHttpToolsProtocol

    _refuse_or_continue("web")
    config = uvicorn.Config(
        "config.asgi:application",
        host=settings.HOST,
        port=settings.PORT,
        workers=settings.WEB_WORKERS,
        # httptools with the header timeout, the header caps and the connection cap uvicorn
        # lacks (config/http_protocol.py); keep-alive idle connections close after this long.
        http=GuardedHttpToolsProtocol,
        timeout_keep_alive=settings.WEB_KEEP_ALIVE_SECONDS,
        lifespan="on",
        # Forwarded headers are judged by config.middleware against TRUSTED_PROXIES, not by
        # uvicorn (which would trust 127.0.0.1 by default).
        proxy_headers=False,
        server_header=False,
        # A client WebSocket frame is capped as a /v1 body is: refused from its header (close
        # 1009) before it is read (proxy/v1/websocket.py).
        ws_max_size=settings.V1_MAX_BODY_BYTES,
        log_config=_uvicorn_log_config(),
        # After SIGTERM, requests in flight may finish for this long; then they are cancelled
        # and the lifespan shutdown writes what they left (config/drain.py).
        # uvicorn annotates it int but only hands it to asyncio as a timeout (a float is fine).
        timeout_graceful_shutdown=request_budget(),  # type: ignore[arg-type]
    )
    if config.workers == 1:
        uvicorn.Server(config).run()
        return

    class DrainingMultiprocess(Multiprocess):
        """Closes the shared listening socket before telling the workers to stop, so that
        during the drain new connections are refused instead of queueing unanswered in the
        backlog until the exit."""

        def terminate_all(self) -> None:
            for listening in self.sockets:
                listening.close()
            super().terminate_all()

    DrainingMultiprocess(config, sockets=[config.bind_socket()]).run()


def run_celery(process: str) -> None:
    from django.conf import settings

    _refuse_or_continue(process)
    command = [sys.executable, "-m", "celery", "-A", "config", process, "-l", settings.LOG_LEVEL]
    if process == "worker":
        command += ["--concurrency", str(settings.CELERY_WORKER_CONCURRENCY), "-n", "worker@%h"]
    else:
        command += ["-s", settings.CELERY_BEAT_SCHEDULE_FILENAME, "--pidfile="]
    sys.stdout.flush()
    os.execv(sys.executable, command)  # noqa: S606 - replaces this process with celery


def prepare() -> None:
    from django.core.management import call_command

    from config.startup import StartupRefused, ensure_default_admin

    call_command("migrate", interactive=False, verbosity=1)
    try:
        ensure_default_admin()
    except StartupRefused as refusal:
        print(f"refusing to start: {refusal}", file=sys.stderr)
        sys.exit(2)


def _web_is_healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/healthz", timeout=2) as reply:  # noqa: S310
            return reply.status == 204
    except (urllib.error.URLError, OSError):
        return False


def _wait_until_ready(
    base_url: str,
    children: dict[str, subprocess.Popen],
    ready_directory: Path,
    stop_requested: Callable[[], bool],
) -> list[str] | None:
    """Wait (up to 120 s) for web's /healthz and the worker's and beat's start signals; the
    ones still starting then ([] when all are), or None when a child exited or a stop was
    asked for meanwhile."""
    deadline = time.monotonic() + 120
    healthy = False
    while True:
        if stop_requested() or any(child.poll() is not None for child in children.values()):
            return None
        healthy = healthy or _web_is_healthy(base_url)
        waiting = ([] if healthy else ["web"]) + not_ready(ready_directory)
        if not waiting or time.monotonic() > deadline:
            return waiting
        time.sleep(0.3)


def _stop(children: dict[str, subprocess.Popen]) -> None:
    from django.conf import settings

    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    longest_drain = max(settings.WEB_DRAIN_TIMEOUT_SECONDS, settings.WORKER_DRAIN_TIMEOUT_SECONDS)
    deadline = time.monotonic() + longest_drain + _SHUTDOWN_MARGIN_SECONDS
    for child in children.values():
        remaining = max(0.1, deadline - time.monotonic())
        try:
            child.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run_all() -> int:
    """Prepare, then supervise web + worker + beat until Ctrl-C or one of them exits."""
    from django.conf import settings

    prepare()
    from django.db import connections

    connections.close_all()
    # The worker and beat mark their start here (config/run_messages.py).
    ready_directory = Path(tempfile.mkdtemp(prefix="cpr-run-ready-"))
    # Unbuffered: through a pipe too (`make run | tee run.log`), the children's own banners are
    # out before they signal their start, so the ready banner comes after them.
    environment = {
        "PYTHONUNBUFFERED": "1",
        **os.environ,
        READY_SIGNAL_DIRECTORY: str(ready_directory),
    }
    children = {
        name: subprocess.Popen([sys.executable, "-m", "config.run", name], env=environment)
        for name in PROCESSES
    }
    stopping = False
    interrupted = False

    def request_stop(signum, frame):
        nonlocal stopping, interrupted
        stopping = interrupted = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    try:
        waiting = _wait_until_ready(
            local_base_url(settings.HOST, settings.PORT),
            children,
            ready_directory,
            lambda: stopping,
        )
        if waiting is not None:
            print(ready_banner(settings, waiting_for=waiting), flush=True)
        exit_code = 0
        while not stopping:
            for name, child in children.items():
                code = child.poll()
                if code is not None:
                    print(f"{name} exited with status {code}; stopping the others", file=sys.stderr)
                    exit_code = code or 1
                    stopping = True
                    break
            time.sleep(0.2)
        if interrupted:
            print(stopping_notice(settings), flush=True)
        _stop(children)
        print(stopped_notice(settings), flush=True)
        return exit_code
    finally:
        shutil.rmtree(ready_directory, ignore_errors=True)


METRICS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# Set by `all` for its children: the directory is theirs to share, already emptied.
_METRICS_DIRECTORY_PREPARED = "CPR_METRICS_DIRECTORY_PREPARED"


def prepare_metrics_directory(command: str) -> None:
    """Give the processes of ``all`` (web, worker, beat) and of ``web`` alone one Prometheus
    multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``, default ``var/prometheus``), emptied
    at start so no dead process's counts carry over. Must run before prometheus_client is
    imported: it reads the variable once. The children of ``all`` inherit it as it is."""
    if command not in ("all", "web") or os.environ.get(_METRICS_DIRECTORY_PREPARED):
        return
    from config.env import env_str

    default_var_dir = Path(__file__).resolve().parent.parent / "var"
    var_dir = Path(env_str("CPR_VAR_DIR", str(default_var_dir))).resolve()
    directory = Path(env_str(METRICS_DIRECTORY_VARIABLE, str(var_dir / "prometheus")))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[METRICS_DIRECTORY_VARIABLE] = str(directory)
    os.environ[_METRICS_DIRECTORY_PREPARED] = "1"


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "all"
    if command not in {"all", "prepare", "stop-embedded", *PROCESSES}:
        print(__doc__, file=sys.stderr)
        return 64
    if command == "stop-embedded":
        return stop_embedded()
    prepare_metrics_directory(command)
    _setup_django()
    if command == "all":
        return run_all()
    if command == "prepare":
        prepare()
        return 0
    if command == "web":
        run_web()
        return 0
    run_celery(command)
    return 0


def stop_embedded() -> int:
    """Stop the embedded servers without ``bootstrap.prepare()`` (which would start them)."""
    from config import embedded
    from config.env import env_str

    # The same reading as config.settings: a blank value means unset (the embedded servers).
    default_var_dir = Path(__file__).resolve().parent.parent / "var"
    var_dir = Path(env_str("CPR_VAR_DIR", str(default_var_dir))).resolve()
    if env_str("REDIS_URL") is None and embedded.stop_redis(var_dir):
        print("Stopped the embedded Redis.")
    if env_str("DATABASE_URL") is None and embedded.stop_postgres(var_dir):
        print("Stopped the embedded PostgreSQL.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
