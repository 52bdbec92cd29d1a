"""SIGTERM to the real web process (``python -m config.run web``, two uvicorn workers) while 50
streams are in flight: it stops accepting at once, lets the streams that can finish finish,
cuts the rest at the drain deadline, writes every ledger row, frees every slot and exits within
WEB_DRAIN_TIMEOUT_SECONDS (config/drain.py)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil
import pytest
import redis
import requests
from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.embedded import database_url_for, free_port
from proxy.models import RuntimeSettings
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.models import OpsErrorLog, UsageRecord
from tests.conftest import PROJECT_ROOT, project_environment
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account

pytestmark = pytest.mark.subprocess

DRAIN_TIMEOUT_SECONDS = 16  # streams may run 11 s after the signal, then 5 s for the rest
SHORT_STREAMS = 35  # ~6 s each: they finish during the drain
LONG_STREAMS = 15  # ~100 s each: cut at the deadline


@dataclass
class StreamResult:
    status: int | None = None
    completed_response_id: str | None = None
    error: str | None = None
    saw_done: bool = False
    events: list[str] = field(default_factory=list)
    failure_codes: list[str] = field(default_factory=list)


def _stream(url: str, key: str, result: StreamResult) -> None:
    try:
        with requests.post(
            f"{url}/v1/responses",
            data=json.dumps({"model": "gpt-5.4", "input": []}),
            headers={"Authorization": f"Bearer {key}"},
            stream=True,
            timeout=60,
        ) as response:
            result.status = response.status_code
            for line in response.iter_lines():
                if line == b"data: [DONE]":
                    result.saw_done = True
                elif line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    result.events.append(event["type"])
                    if event["type"] == "response.completed":
                        result.completed_response_id = event["response"]["id"]
                    elif event["type"] == "response.failed":
                        result.failure_codes.append(event["response"]["error"]["code"])
    except requests.RequestException as error:
        result.error = type(error).__name__


def _environment(tmp_path, **variables: str) -> dict[str, str]:
    """A project process on this test's (committed) database, with an admin password ready."""
    return project_environment(
        database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"]),
        tmp_path,
        CPR_ADMIN_DEFAULT_PASSWORD="graceful stop passphrase",
        **variables,
    )


def _start(process_name: str, environment: dict[str, str], log_path) -> subprocess.Popen:
    """``python -m config.run <process_name>``, its output in ``log_path``."""
    log = open(log_path, "w")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(
        [sys.executable, "-m", "config.run", process_name],
        cwd=PROJECT_ROOT,
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _refuses_connections(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def web_process(upstream, transactional_db, tmp_path):
    from django.utils import timezone

    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    port = free_port()
    environment = _environment(
        tmp_path,
        REDIS_KEY_PREFIX=settings.REDIS_KEY_PREFIX,
        CODEX_UPSTREAM_BASE=upstream.url,
        PORT=str(port),
        WEB_WORKERS="2",
        WEB_DRAIN_TIMEOUT_SECONDS=str(DRAIN_TIMEOUT_SECONDS),
    )
    process = _start("web", environment, tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"{base}/healthz", timeout=2).status_code == 204:
                break
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError((tmp_path / "web.log").read_text())
        time.sleep(0.2)
    yield process, base, port
    if process.poll() is None:
        # Stopped as an operator stops it, and its uvicorn workers with it: a SIGKILL of
        # config.run alone left them running (holding database connections) after the test.
        workers = psutil.Process(process.pid).children(recursive=True)
        process.terminate()
        try:
            process.wait(DRAIN_TIMEOUT_SECONDS + 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for worker in workers:
            if worker.is_running():
                worker.kill()


def test_sigterm_during_50_streams_loses_nothing(web_process, upstream, client_key):
    process, base, port = web_process
    RuntimeSettings.objects.update(max_concurrent_per_account=100, request_interval_ms=0)
    # A key policy too: its in-flight slots must be settled before the process exits.
    key_policy_set(
        key=client_key, values=PolicyValues(max_concurrent_requests=100), now=timezone.now()
    )
    account = make_pool_account("tok-drain")
    upstream.program(
        "tok-drain",
        *[Reply(text="word " * 12, deltas=12, delta_delay=0.5) for _ in range(SHORT_STREAMS)],
        *[Reply(text="word " * 400, deltas=400, delta_delay=0.25) for _ in range(LONG_STREAMS)],
    )
    results = [StreamResult() for _ in range(SHORT_STREAMS + LONG_STREAMS)]
    threads = [
        threading.Thread(target=_stream, args=(base, client_key.key, result)) for result in results
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while upstream.in_flight["tok-drain"] < len(results):
        assert time.monotonic() < deadline, f"only {upstream.in_flight['tok-drain']} in flight"
        time.sleep(0.02)

    process.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    # New connections are refused at once, while the streams go on.
    while not _refuses_connections(port):
        assert time.monotonic() - signalled_at < 2, "still accepting connections"
        time.sleep(0.05)
    assert upstream.in_flight["tok-drain"] > 0

    exit_code = process.wait(timeout=DRAIN_TIMEOUT_SECONDS + 10)
    stopped_after = time.monotonic() - signalled_at
    for thread in threads:
        thread.join(10)

    assert exit_code == 0
    assert stopped_after < DRAIN_TIMEOUT_SECONDS
    completed = [result for result in results if result.completed_response_id is not None]
    cut = [result for result in results if result.completed_response_id is None]
    assert len(completed) == SHORT_STREAMS
    assert all(result.status == 200 and result.saw_done for result in completed)
    assert len(cut) == LONG_STREAMS
    # Cut at the drain's deadline, a stream ends with the server_shutdown failure event (so the
    # client knows to retry) and [DONE], not in the middle of its deltas.
    assert all(
        result.status == 200 and result.saw_done and result.failure_codes == ["server_shutdown"]
        for result in cut
    ), [(result.status, result.saw_done, result.failure_codes, result.error) for result in cut]
    assert all(result.failure_codes == [] for result in completed)
    # Every stream that completed has its usage row; every cut one its error row.
    assert sorted(UsageRecord.objects.values_list("response_id", flat=True)) == sorted(
        result.completed_response_id for result in completed
    )
    assert UsageRecord.objects.filter(account_id=account.id, status_code=200).count() == len(
        completed
    )
    cut_rows = OpsErrorLog.objects.filter(account_id=account.id)
    assert cut_rows.count() == LONG_STREAMS
    assert set(cut_rows.values_list("status_code", "failure_class")) == {(503, "server_shutdown")}
    # No slot is left held in Redis, and the upstream saw every stream closed.
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert client.zcard(f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{account.id}") == 0
    assert client.zcard(f"{settings.REDIS_KEY_PREFIX}policy:in_flight:{client_key.id}") == 0
    client.close()
    assert upstream.in_flight["tok-drain"] == 0


def _start_worker(environment: dict[str, str], log_path) -> subprocess.Popen:
    worker = _start("worker", environment, log_path)
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(log_path.read_text())
        time.sleep(0.1)
    return worker


def test_sigterm_hands_a_running_job_back_to_the_queue(upstream, transactional_db, tmp_path):
    from django.utils import timezone

    from proxy.services.fingerprints import fingerprint_ensure_current

    fingerprint_ensure_current(now=timezone.now())
    make_pool_account("tok-job", plan_type="pro")
    upstream.models_by_token["tok-job"] = {"models": [{"slug": "gpt-5.4"}]}
    upstream.models_delay = 60  # the job hangs on its upstream call
    # A prefix of its own: the session's Celery worker must not take this job.
    prefix = f"{settings.REDIS_KEY_PREFIX}stop:"
    environment = _environment(
        tmp_path,
        REDIS_KEY_PREFIX=prefix,
        CODEX_UPSTREAM_BASE=upstream.url,
        CELERY_WORKER_CONCURRENCY="1",
        WORKER_DRAIN_TIMEOUT_SECONDS="2",
    )
    client = redis.Redis.from_url(settings.REDIS_URL)
    snapshots_key = f"{prefix}models:plan_snapshots"
    first = _start_worker(environment, tmp_path / "first.log")
    try:
        queued = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from proxy.tasks import refresh_models_task; refresh_models_task.delay()"],
            cwd=PROJECT_ROOT, env=environment, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert queued.returncode == 0, queued.stderr
        deadline = time.monotonic() + 30
        while not upstream.server.requests_to("/codex/models"):
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            time.sleep(0.05)

        first.send_signal(signal.SIGTERM)
        signalled_at = time.monotonic()
        first.wait(timeout=30)
        stopped_after = time.monotonic() - signalled_at
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    # It waited for the job for the drain timeout, then stopped without finishing it ...
    assert 2 <= stopped_after < 10, (tmp_path / "first.log").read_text()
    assert client.hget(snapshots_key, "pro") is None
    # ... and handed it back: the next worker runs it.
    upstream.models_delay = 0
    second = _start_worker(environment, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 60
        while client.hget(snapshots_key, "pro") is None:
            assert time.monotonic() < deadline, (tmp_path / "second.log").read_text()
            time.sleep(0.1)
        assert len(upstream.server.requests_to("/codex/models")) == 2
        # An idle worker stops at once, cleanly.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=15) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
        client.close()


def test_sigterm_stops_beat_cleanly(transactional_db, tmp_path):
    environment = _environment(tmp_path, REDIS_KEY_PREFIX=f"{settings.REDIS_KEY_PREFIX}stop:")
    log_path = tmp_path / "beat.log"
    beat = _start("beat", environment, log_path)
    try:
        deadline = time.monotonic() + 60
        while "beat: Starting..." not in log_path.read_text():
            assert beat.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)

        beat.send_signal(signal.SIGTERM)

        # Beat only sends jobs (it runs none): it stops at once, with status 0.
        assert beat.wait(timeout=15) == 0, log_path.read_text()
    finally:
        if beat.poll() is None:
            beat.kill()
            beat.wait()
