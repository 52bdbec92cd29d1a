"""What ``python -m config.run all`` (``make run``) tells the person at the terminal: the ready
banner once web answers ``/healthz`` and the worker and beat have started (so it comes after
their own start-up banners instead of being pushed off screen by them), and, on Ctrl-C, what
stopped and what keeps running.

The worker and beat say they have started by creating a file in the folder ``all`` names in
``CPR_READY_SIGNAL_DIR`` (``mark_ready``, from Celery's ``worker_ready`` and ``beat_init``
signals: both come after the process's banner). Run any other way, they do nothing of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

READY_SIGNAL_DIRECTORY = "CPR_READY_SIGNAL_DIR"
# Each process of `all` whose start the banner waits for beside web's /healthz.
SIGNALLING_PROCESSES = ("worker", "beat")
_WILDCARD_HOSTS = {"", "0.0.0.0", "::"}  # noqa: S104 - names the wildcards, binds nothing


def mark_ready(process: str) -> None:
    """Create ``<CPR_READY_SIGNAL_DIR>/<process>`` when started by ``all``; else nothing."""
    directory = os.environ.get(READY_SIGNAL_DIRECTORY)
    if directory:
        Path(directory, process).touch()


def not_ready(directory: Path) -> list[str]:
    """The signalling processes that have not said they started (``mark_ready``)."""
    return [name for name in SIGNALLING_PROCESSES if not (directory / name).exists()]


def local_base_url(host: str, port: int) -> str:
    """Where this machine reaches web: 127.0.0.1 when it listens on every address."""
    if host in _WILDCARD_HOSTS:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def admin_password_hint(settings: Any) -> str:
    """Where the admin password is, never the password itself."""
    password_file = Path(settings.GENERATED_ADMIN_PASSWORD_FILE)
    if password_file.exists():
        return (
            f"in {password_file} (generated on the first start; the file goes when the "
            "password is changed)"
        )
    if settings.CPR_ADMIN_DEFAULT_PASSWORD is not None:
        return "the value of CPR_ADMIN_DEFAULT_PASSWORD, unless it was changed since"
    return "the one last set (a new one: manage.py set_admin_password)"


def stores_left_running(settings: Any) -> str:
    """What Ctrl-C leaves running, and how to stop it."""
    embedded = [
        name
        for name, is_embedded in (
            ("PostgreSQL", settings.EMBEDDED_POSTGRES),
            ("Redis", settings.EMBEDDED_REDIS),
        )
        if is_embedded
    ]
    external = [
        f"{name} ({variable})"
        for name, variable, is_embedded in (
            ("PostgreSQL", "DATABASE_URL", settings.EMBEDDED_POSTGRES),
            ("Redis", "REDIS_URL", settings.EMBEDDED_REDIS),
        )
        if not is_embedded
    ]
    parts = []
    if embedded:
        names = " and ".join(embedded)
        verb, them = ("keeps", "it") if len(embedded) == 1 else ("keep", "them")
        parts.append(
            f"The embedded {names} {verb} running for the next start (data in "
            f"{settings.VAR_DIR}); `make stop-embedded` (or `python -m config.run "
            f"stop-embedded`) stops {them}, keeping the data."
        )
    if external:
        parts.append(f"External {' and '.join(external)}: not ours to stop, left as they are.")
    return " ".join(parts)


def ready_banner(settings: Any, *, waiting_for: list[str]) -> str:
    """The banner ``all`` prints once web, worker and beat have started (or, with
    ``waiting_for``, when some of them still had not after the wait)."""
    base = local_base_url(settings.HOST, settings.PORT)
    heading = (
        "Ready: web, worker and beat are running."
        if not waiting_for
        else f"Still starting after 2 minutes: {', '.join(waiting_for)} (the rest is running)."
    )
    return (
        f"\n  {heading}\n"
        f"  Django admin:    {base}/admin/   (user '{settings.CPR_ADMIN_USERNAME}')\n"
        f"  Admin password:  {admin_password_hint(settings)}\n"
        f"  Health:          {base}/healthz\n"
        f"  Stop:            Ctrl-C stops web, worker and beat.\n"
        f"                   {stores_left_running(settings)}\n"
    )


def stopping_notice(settings: Any) -> str:
    longest = max(settings.WEB_DRAIN_TIMEOUT_SECONDS, settings.WORKER_DRAIN_TIMEOUT_SECONDS)
    return (
        f"\n  Stopping web, worker and beat (requests and jobs in flight get up to {longest} s; "
        "a second Ctrl-C cuts the wait short)."
    )


def stopped_notice(settings: Any) -> str:
    return f"\n  Stopped web, worker and beat. {stores_left_running(settings)}\n"
