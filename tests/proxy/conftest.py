"""Fixtures for the /v1 request path: the fake upstream and a real uvicorn serving the project."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import openai
import pytest
import requests
from django.conf import settings
from django.db import connection
from django.utils import timezone

from proxy.ledger import writer as ledger_writer
from proxy.policies.admission import await_pending_settlements
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from tests.conftest import _free_port, database_url_for
from tests.live_server import LiveASGIServer
from tests.proxy.factories import make_account

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def upstream(fake_codex, settings):
    """The fake ChatGPT upstream, reset, with the project pointed at it."""
    fake_codex.reset()
    settings.CODEX_UPSTREAM_BASE = fake_codex.url
    yield fake_codex
    fake_codex.reset()


class LiveServer(LiveASGIServer):
    """uvicorn serving config.asgi in a thread of the test process (same settings/database)."""

    def __init__(self) -> None:
        super().__init__()

    def drain(self) -> None:
        """Wait until the ledger writes and key-policy settlements the server scheduled have
        finished."""
        future = asyncio.run_coroutine_threadsafe(ledger_writer.await_pending_writes(), self.loop)
        future.result(30)
        future = asyncio.run_coroutine_threadsafe(await_pending_settlements(), self.loop)
        future.result(30)

    def close_idle_websockets(self) -> None:
        """Close the upstream WebSockets the server's pool keeps (each test starts without)."""
        from proxy.clients.codex.ws_pool import websocket_pool

        async def close() -> None:
            await websocket_pool.get_or_create().close_all()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(30)


@pytest.fixture(scope="session")
def asgi_server(django_db_setup, django_db_blocker):
    server = LiveServer()
    yield server
    server.stop()


class UvicornProcess:
    """``uvicorn config.asgi:application`` in a process of its own, on this run's database
    and Redis (``environment`` overrides, e.g. another ``REDIS_URL``), answering once its
    /healthz says both stores are up."""

    def __init__(self, upstream_url: str, **environment: str):
        self.port = _free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-proxy-headers",  # as config.run serves
            ],
            cwd=PROJECT_ROOT,
            env={
                **os.environ,
                "DATABASE_URL": database_url_for(
                    settings.DATABASES["default"], connection.settings_dict["NAME"]
                ),
                "REDIS_URL": settings.REDIS_URL,
                "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
                "CODEX_UPSTREAM_BASE": upstream_url,
                **environment,
            },
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 204:
                    break
            # Refused while it starts; on a loaded machine its first answer may take over 1 s.
            except (requests.ConnectionError, requests.Timeout):
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


def reset_rotation() -> None:
    """Start the shared rotation cursor (in Redis) from the beginning again."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(f"{settings.REDIS_KEY_PREFIX}scheduler:cursor")
    client.close()


@pytest.fixture
def proxy(asgi_server, upstream, transactional_db):
    """A running proxy with committed data visible to it; ``proxy.drain()`` waits for the ledger."""
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    reset_rotation()
    yield asgi_server
    asgi_server.drain()
    asgi_server.close_idle_websockets()


@pytest.fixture
def private_proxy(private_redis, upstream, transactional_db, settings):
    """A proxy of its own on a private Redis, which the test may flush."""
    settings.REDIS_URL = private_redis.url
    settings.CACHES = {
        **settings.CACHES,
        "default": {**settings.CACHES["default"], "LOCATION": private_redis.url},
    }
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    server = LiveServer()
    try:
        yield server
        server.drain()
    finally:
        server.stop()


@pytest.fixture
def client_key(transactional_db):
    return client_api_key_create(name="tests", now=timezone.now())


def make_pool_account(token: str, **fields):
    """An account the scheduler may use: active, with a token valid for a day."""
    return make_account(
        access_token=token,
        access_token_expires_at=fields.pop(
            "access_token_expires_at", timezone.now() + timedelta(days=1)
        ),
        chatgpt_account_id=fields.pop("chatgpt_account_id", f"org-{token}"),
        **fields,
    )


@pytest.fixture
def sdk(proxy, upstream, client_key):
    """The official ``openai`` client on the proxy, with one pool account (token ``tok-sdk``)."""
    make_pool_account("tok-sdk")
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=client_key.key, max_retries=0)


def post_responses(proxy, key, body, *, timeout: float = 60, **headers) -> requests.Response:
    """``POST /v1/responses`` with the client key: ``body`` a dict (sent as JSON), or the raw
    bytes/text (or an iterator of bytes, sent chunked) to send; ``headers`` added."""
    return requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps(body) if isinstance(body, dict) else body,
        headers={
            "Authorization": f"Bearer {key.key}",
            "Content-Type": "application/json",
            **headers,
        },
        timeout=timeout,
    )


@pytest.fixture
def oauth(fake_oauth, settings):
    """The fake OAuth server, reset, with the project pointed at it."""
    fake_oauth.reset()
    settings.OPENAI_AUTH_BASE = fake_oauth.url
    yield fake_oauth
    fake_oauth.reset()


@pytest.fixture
def appcast(fake_appcast, settings):
    """The fake appcast, reset, with the project pointed at it."""
    fake_appcast.reset()
    settings.CODEX_APPCAST_URL = fake_appcast.appcast_url
    yield fake_appcast
    fake_appcast.reset()


def make_oauth_account(oauth, identity, *, expires_in: float = 600, **fields):
    """An account holding a fresh token pair the fake OAuth server issued for ``identity``."""
    from proxy.token_claims import token_expiry

    access, refresh = oauth.issue(identity, expires_in=expires_in)
    return make_account(
        access_token=access,
        refresh_token=refresh,
        access_token_expires_at=token_expiry(access),
        chatgpt_account_id=identity.account_id,
        chatgpt_user_id=identity.user_id,
        plan_type=identity.plan_type,
        email=identity.email,
        **fields,
    )


@pytest.fixture
def console_in_utc(settings):
    """For tests whose figures are written in UTC days and hours: the console's zone is a
    setting (CONSOLE_TIME_ZONE, Asia/Shanghai by default) that every page follows
    (tests/proxy/test_console_time_zone.py)."""
    settings.TIME_ZONE = "UTC"
