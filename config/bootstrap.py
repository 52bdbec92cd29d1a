"""What a process needs before Django is set up: ``prepare()``, called by every entry point
(``manage.py``, ``python -m config.run``, ``config.asgi`` / ``config.wsgi``, the Celery app,
bench/ scripts and the test session's ``-p tests.run_isolation`` plugin).

The settings only read the environment; this module makes that environment whole:

* ``var/`` (``CPR_VAR_DIR``) exists and holds the generated Django secret key
  (``var/secret_key``, 0600) unless ``DJANGO_SECRET_KEY`` is given;
* with no ``DATABASE_URL`` the embedded PostgreSQL under ``var/postgres`` is started (or found
  running), with no ``REDIS_URL`` the embedded Redis under ``var/redis``, and where they are is
  published as ``CPR_EMBEDDED_POSTGRES`` / ``CPR_EMBEDDED_REDIS_URL`` for the settings — and for
  the child processes (``config.run``'s uvicorn and Celery), which find them ready.

Idempotent: a second call (or a child process with the published values for the same ``var/``)
starts nothing.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import MutableMapping
from pathlib import Path

from config import embedded
from config.env import env_str
from config.secret_files import read_or_create_secret

BASE_DIR = Path(__file__).resolve().parent.parent
EMBEDDED_POSTGRES_VARIABLE = "CPR_EMBEDDED_POSTGRES"
EMBEDDED_REDIS_VARIABLE = "CPR_EMBEDDED_REDIS_URL"
SECRET_KEY_FILE = "secret_key"


def var_dir() -> Path:
    """The folder of generated state (``CPR_VAR_DIR``, default ``./var``)."""
    return Path(env_str("CPR_VAR_DIR", str(BASE_DIR / "var"))).resolve()


def _published_for(environ: MutableMapping[str, str], name: str, folder: Path) -> dict | None:
    raw = environ.get(name)
    if not raw:
        return None
    try:
        published = json.loads(raw)
    except ValueError:
        return None
    return published if published.get("var_dir") == str(folder) else None


def prepare(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make ``var/`` and its secret key, start the embedded stores the environment asks for
    (no ``DATABASE_URL`` / ``REDIS_URL``) and publish where they are in ``environ``."""
    folder = var_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if not env_str("DJANGO_SECRET_KEY"):
        read_or_create_secret(folder / SECRET_KEY_FILE, lambda: secrets.token_urlsafe(50))
    if env_str("DATABASE_URL") is None and not _published_for(
        environ, EMBEDDED_POSTGRES_VARIABLE, folder
    ):
        postgres = embedded.ensure_postgres(folder)
        environ[EMBEDDED_POSTGRES_VARIABLE] = json.dumps(
            {
                "var_dir": str(folder),
                "url": postgres.url,
                "database": postgres.database,
                "user": postgres.user,
                "socket_dir": str(postgres.socket_dir),
                "port": postgres.port,
            }
        )
    if env_str("REDIS_URL") is None and not _published_for(
        environ, EMBEDDED_REDIS_VARIABLE, folder
    ):
        environ[EMBEDDED_REDIS_VARIABLE] = json.dumps(
            {"var_dir": str(folder), "url": embedded.ensure_redis(folder)}
        )


class NotPrepared(RuntimeError):
    """The settings were imported without ``prepare()`` where they need its results."""


def published_postgres(folder: Path) -> dict:
    """The embedded PostgreSQL ``prepare()`` published for ``folder``. Raises NotPrepared."""
    published = _published_for(os.environ, EMBEDDED_POSTGRES_VARIABLE, folder)
    if published is None:
        raise NotPrepared(
            "DATABASE_URL is not set and no embedded PostgreSQL was started for "
            f"{folder}: start through manage.py or `python -m config.run`, or set DATABASE_URL"
        )
    return published


def published_redis_url(folder: Path) -> str:
    """The embedded Redis URL ``prepare()`` published for ``folder``. Raises NotPrepared."""
    published = _published_for(os.environ, EMBEDDED_REDIS_VARIABLE, folder)
    if published is None:
        raise NotPrepared(
            "REDIS_URL is not set and no embedded Redis was started for "
            f"{folder}: start through manage.py or `python -m config.run`, or set REDIS_URL"
        )
    return published["url"]


def secret_key(folder: Path) -> str:
    """The generated secret key of ``folder`` (``prepare()`` wrote it). Raises NotPrepared."""
    try:
        return (folder / SECRET_KEY_FILE).read_text().strip()
    except FileNotFoundError:
        raise NotPrepared(
            f"DJANGO_SECRET_KEY is not set and {folder / SECRET_KEY_FILE} does not exist: start"
            " through manage.py or `python -m config.run`, or set DJANGO_SECRET_KEY"
        ) from None
