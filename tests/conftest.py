from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.conf import settings

from config.embedded import (
    database_url_for,
    free_port,
    maintenance_connection,
    redis_server_executable,
    redis_url,
)
from tests import table_cleanup

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Transactional tests truncate only the tables they wrote (tests/table_cleanup.py).
table_cleanup.install()
# Tests of other folders import the port helper under this name.
_free_port = free_port


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


def clear_request_throttles() -> None:
    """Forget this run's log-in throttle counts and locks and the selfcheck counters: tests
    that fail log-ins on purpose must not lock the admin out of the tests after them, and
    tests on a frozen clock share one selfcheck second."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for pattern in ("login:*", "telegram:selfcheck:*"):
        keys = list(client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}{pattern}"))
        if keys:
            client.delete(*keys)
    client.close()


@pytest.fixture(autouse=True)
def fresh_request_throttles():
    """Every test starts with no log-in failure and no selfcheck counted (all test clients
    are 127.0.0.1)."""
    clear_request_throttles()
    yield


def project_environment(database_url: str, var_dir: Path, **variables: str) -> dict[str, str]:
    """The environment of a project process (manage.py, config.run) for this test run: the
    given database, this run's Redis and key prefix, its own var/ folder, then ``variables``."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": settings.REDIS_URL,
        "CPR_VAR_DIR": str(var_dir),
        **variables,
    }


def run_project(
    *arguments: str, environment: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python <arguments>`` in the project folder (``manage.py …`` or ``-m config.run …``),
    waited for, its output captured as text."""
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def migrate_project(environment: dict[str, str]) -> None:
    """``manage.py migrate`` in a subprocess; fails the test with its stderr if it fails."""
    migrated = run_project("manage.py", "migrate", "--noinput", environment=environment)
    assert migrated.returncode == 0, migrated.stderr


class PrivateRedis:
    """A real Redis-protocol server (the embedded default's binary) of one test, which the test
    may stop; with ``password`` it requires that password, like the embedded one."""

    def __init__(self, directory: Path, *, password: str | None = None):
        self.port = free_port()
        self.directory = directory
        self.password = password
        self.process = subprocess.Popen(
            [
                redis_server_executable(),
                *(["--requirepass", password] if password else []),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                str(directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, password=password).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return redis_url(self.port, self.password)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def flush_this_runs_keys() -> int:
    """What a FLUSHALL does to this run: every key of its prefix goes. The shared server's other
    runs and xdist workers keep theirs (a real FLUSHALL there wiped a parallel test's send
    limiter and broker queues mid-test); a test that must FLUSHALL uses ``private_redis``."""
    from tests.run_isolation import delete_keys_with_prefix

    return delete_keys_with_prefix(settings.REDIS_URL, settings.REDIS_KEY_PREFIX)


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def scratch_database():
    """An empty database on the test server, dropped afterwards; yields its DATABASE_URL."""
    server = settings.DATABASES["default"]
    name = f"cpr_scratch_{uuid.uuid4().hex[:10]}"
    with maintenance_connection(server) as admin:
        admin.execute(f'create database "{name}"')
    yield database_url_for(server, name)
    with maintenance_connection(server) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture(scope="session")
def fake_codex():
    """The fake ChatGPT upstream of the session (the Celery worker is pointed at it too)."""
    from tests.fakes.codex import FakeCodexUpstream

    fake = FakeCodexUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_oauth():
    """The fake OpenAI OAuth server of the session (the Celery worker is pointed at it too)."""
    from tests.fakes.oauth import FakeOAuthServer

    fake = FakeOAuthServer().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_appcast():
    """The fake Codex Desktop appcast of the session (the Celery worker reads it too)."""
    from tests.fakes.appcast import FakeAppcast

    fake = FakeAppcast().start()
    yield fake
    fake.stop()


class CeleryWorkerProcess:
    """A real ``celery worker`` subprocess bound to this test run's database and Redis prefix.

    ``arguments`` replace the default ``--pool solo`` (e.g. another queue or pool)."""

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        extra_environment: dict[str, str],
        arguments: tuple[str, ...] = ("--pool", "solo"),
    ):
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                *arguments,
                "-l",
                "INFO",
            ],
            cwd=PROJECT_ROOT,
            env={
                **os.environ,
                "DATABASE_URL": database_url,
                "REDIS_URL": settings.REDIS_URL,
                **extra_environment,
            },
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while "ready." not in log_path.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery worker did not start:\n{log_path.read_text()}")
            time.sleep(0.1)

    def run(self, task, *args, timeout: float = 60, **kwargs):
        """Send ``task`` through the broker, wait for the worker to finish it, return its result."""
        return task.apply_async(args=args, kwargs=kwargs, ignore_result=False).get(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# The pace of the support bot's bulk deletions in tests (web process and worker alike): fast,
# so purges of thousands of messages stay quick, and below the fake's rate limits tests set.
BOT_DELETES_PER_SECOND = "400"


@pytest.fixture(scope="session")
def worker_telegram():
    """The fake Bot API the Celery worker's bot talks to (the worker's environment is fixed at
    start). Bot tests that use the worker take it as their ``telegram`` (reset per test)."""
    from tests.fakes.telegram import FakeTelegram

    fake = FakeTelegram().start()
    yield fake
    fake.stop()


def run_database_url(django_db_blocker) -> str:
    """DATABASE_URL of this run's test database (for processes the tests start)."""
    with django_db_blocker.unblock():
        from django.db import connection

        return database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"])


def fakes_environment(fake_codex, fake_oauth, fake_appcast) -> dict[str, str]:
    """The variables pointing a project process at the session's fakes of outside services."""
    return {
        "CODEX_UPSTREAM_BASE": fake_codex.url,
        "OPENAI_AUTH_BASE": fake_oauth.url,
        "CODEX_APPCAST_URL": fake_appcast.appcast_url,
    }


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup,
    django_db_blocker,
    tmp_path_factory,
    fake_codex,
    fake_oauth,
    fake_appcast,
    worker_telegram,
):
    """A real Celery worker for the session. Tests using it need committed data
    (``@pytest.mark.django_db(transaction=True)``): the worker has its own connection."""
    worker = CeleryWorkerProcess(
        run_database_url(django_db_blocker),
        tmp_path_factory.mktemp("celery") / "worker.log",
        {
            **fakes_environment(fake_codex, fake_oauth, fake_appcast),
            # The support bot's continuations (purge, wipe) call Telegram: the session's fake.
            "TELEGRAM_API_BASE": worker_telegram.api_base,
            "TELEGRAM_BOT_TOKEN": worker_telegram.token,
            "SUPPORT_CHAT_ID": str(worker_telegram.support_chat_id),
            "TELEGRAM_DELETES_PER_SECOND": BOT_DELETES_PER_SECOND,
            "BOT_LANGUAGE": "zh",
        },
    )
    yield worker
    worker.stop()


@pytest.fixture(scope="session", autouse=True)
def close_database_pools_before_teardown(django_db_setup, django_db_blocker):
    """Close the pools (idle connections of worker threads included) before pytest-django
    drops the run's database, which it cannot do while they are connected."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all():
            close_pool = getattr(connection, "close_pool", None)
            if close_pool is not None:
                close_pool()
        # Connections opened by other threads (the live ASGI server's executor) are theirs
        # to close and those threads are gone: end them so the drop does not warn.
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity"
                " where datname = current_database() and pid <> pg_backend_pid()"
            )
        connections["default"].close()


# ------------------------------------------------------------------ browser checks


@pytest.fixture
def browser():
    """A headless Chromium (tests/browser.py); skipped loudly without it, an error with
    REQUIRE_BROWSER=1."""
    from tests.browser import Browser, require_chromium

    chromium, chromedriver = require_chromium()
    instance = Browser(chromium, chromedriver)
    yield instance
    instance.quit()


@pytest.fixture(scope="session")
def https_live_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """The project over https on 127.0.0.1 (a certificate minted for the run), for pages a
    browser opens; tests using it need committed data (``transactional_db``)."""
    from tests.live_server import LiveASGIServer

    server = LiveASGIServer(certificate_dir=tmp_path_factory.mktemp("tls"))
    yield server
    server.stop()


def pytest_collection_modifyitems(items) -> None:
    """xdist tells tests apart by node id, and schemathesis gives every operation of its fuzz
    (tests/proxy/admin_api/test_fuzz.py) the test function's one id: all but one would not
    run. Each such test gets its own name (with the operation) as its id."""
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1:
            # pytest 9 keeps the id as a NodeId (``_id``); its parent's id with the item's name
            # is the id pytest itself would have given it.
            item._id = item.parent.id.child(item.name)


# The screenshots go to the summary through the test reports, which xdist sends from the
# worker that saved them to the process that prints the summary.
_SCREENSHOT_PROPERTY = "browser screenshot"
_summarised_screenshots: dict[str, None] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    from tests.browser import SAVED_SCREENSHOTS

    outcome = yield
    report = outcome.get_result()
    while SAVED_SCREENSHOTS:
        report.user_properties.append((_SCREENSHOT_PROPERTY, str(SAVED_SCREENSHOTS.pop(0))))


def pytest_runtest_logreport(report) -> None:
    for name, value in report.user_properties:
        if name == _SCREENSHOT_PROPERTY:
            _summarised_screenshots[value] = None


def pytest_terminal_summary(terminalreporter) -> None:
    if _summarised_screenshots:
        terminalreporter.section("browser screenshots")
        for path in _summarised_screenshots:
            terminalreporter.write_line(path)
