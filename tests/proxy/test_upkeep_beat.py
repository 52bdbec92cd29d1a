"""The pool heals itself through a real Celery worker and beat: a token about to expire is
refreshed without any request, a 402 account returns to service, and the model catalog (and
the fingerprint) are filled shortly after start-up."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from proxy.models import Account, Fingerprint
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_replace
from proxy.services import quota_refresh
from tests.conftest import PROJECT_ROOT, fakes_environment, run_database_url
from tests.fakes.codex import Reply
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account, make_pool_account, post_responses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]


@contextlib.contextmanager
def beat_running(environment: dict[str, str], folder: Path):
    """``celery -A config beat`` with 1-second upkeep periods, stopped afterwards."""
    log_path = folder / "beat.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "INFO"],
            cwd=PROJECT_ROOT,
            env={
                **os.environ,
                "REDIS_URL": settings.REDIS_URL,
                "CPR_VAR_DIR": str(folder),
                "PROXY_REFRESH_SCAN_INTERVAL_SECONDS": "1",
                "PROXY_QUOTA_REFRESH_INTERVAL_SECONDS": "1",
                **environment,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield log_path
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def beat(
    django_db_blocker, tmp_path, fake_codex, fake_oauth, fake_appcast, celery_worker, settings
):
    settings.OPENAI_AUTH_BASE = fake_oauth.url
    environment = {
        "DATABASE_URL": run_database_url(django_db_blocker),
        **fakes_environment(fake_codex, fake_oauth, fake_appcast),
    }
    return lambda: beat_running(environment, tmp_path)


def wait_for(condition, *, seconds: float = 45) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_token_inside_the_margin_is_refreshed_without_any_request(beat, oauth):
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    account = make_oauth_account(oauth, Identity("org-beat", "user-beat"), expires_in=600)
    fresh = make_oauth_account(oauth, Identity("org-fresh", "user-fresh"), expires_in=86400)
    oauth.expires_in = 10 * 86400  # what the refresh hands out (ChatGPT tokens live ~10 days)

    with beat():
        refreshed = wait_for(
            lambda: Account.objects.get(pk=account.pk).access_token != account.access_token
        )
        time.sleep(2.5)  # two more scans: nothing else is due

    assert refreshed
    row = Account.objects.get(pk=account.pk)
    assert row.refresh_token == oauth.issued_refresh_tokens[2]  # the third pair issued
    assert row.next_refresh_at > timezone.now()
    assert [call["refresh_token"] for call in oauth.token_calls()] == [account.refresh_token]
    later = Account.objects.get(pk=fresh.pk)
    assert later.access_token == fresh.access_token  # not due: only scheduled
    assert later.next_refresh_at is not None


def _usage_reads(upstream) -> list:
    with upstream.server._lock:
        return [request for request in upstream.server.requests if request.path.endswith("usage")]


def test_a_quota_limited_account_returns_to_service_once_its_reset_has_passed(
    beat, proxy, upstream, client_key
):
    account = make_pool_account("tok-reset")
    upstream.program("tok-reset", Reply(kind="status", status=402, body={"detail": "quota"}))
    refused = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert refused.status_code != 200, refused.text
    # What a usage read showing the limit with a known reset writes: read just now (so the
    # "no known reset" re-check every 30 minutes does not apply), the reset 8 s from now once
    # the 30 s grace is counted.
    now = timezone.now()
    Account.objects.filter(pk=account.pk).update(
        status="quota_exhausted",
        quota_limit_reached=True,
        quota_cooldown_until=now - quota_refresh.GRACE + timedelta(seconds=8),
        quota_fetched_at=now,
    )
    reset_passes = time.monotonic() + 8
    reads_before = len(_usage_reads(upstream))
    upstream.usage["tok-reset"] = {
        "plan_type": "plus",
        "rate_limit": {
            "allowed": True,
            "limit_reached": False,
            "primary_window": {"used_percent": 0, "limit_window_seconds": 18000},
        },
    }

    with beat():
        recovered = wait_for(lambda: Account.objects.get(pk=account.pk).status == "active")

    assert recovered
    usage_reads = _usage_reads(upstream)[reads_before:]
    assert usage_reads, "recovered without reading the usage"
    # Not read (let alone recovered) before its reset: the cooldown path brought it back.
    assert usage_reads[0].received_at >= reset_passes - 0.5
    served = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert served.status_code == 200
    assert upstream.tokens_called() == ["tok-reset", "tok-reset"]


def test_a_402_account_with_no_known_reset_is_rechecked_and_returns_to_service(
    beat, proxy, upstream, client_key
):
    account = make_pool_account("tok-402")
    upstream.program("tok-402", Reply(kind="status", status=402, body={"detail": "quota"}))
    refused = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert refused.status_code != 200, refused.text
    assert Account.objects.get(pk=account.pk).status == "quota_exhausted"
    reset_at = int(time.time()) + 18000
    upstream.usage["tok-402"] = {
        "plan_type": "plus",
        "rate_limit": {
            "allowed": True,
            "limit_reached": False,
            "primary_window": {
                "used_percent": 0,
                "limit_window_seconds": 18000,
                "reset_at": reset_at,
            },
        },
    }

    with beat():
        recovered = wait_for(lambda: Account.objects.get(pk=account.pk).status == "active")

    assert recovered
    served = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert served.status_code == 200
    assert upstream.tokens_called() == ["tok-402", "tok-402"]


def test_the_model_catalog_and_fingerprint_are_filled_shortly_after_start_up(
    beat, upstream, appcast, celery_worker
):
    model_snapshots_replace({})
    from proxy.services.fingerprints import fingerprint_ensure_current

    fingerprint_ensure_current(now=timezone.now())
    make_pool_account("tok-start", plan_type="plus")
    upstream.models_by_token["tok-start"] = {"models": [{"slug": "gpt-5.4"}]}
    appcast.publish(("26.800.1", "4000"))

    with beat():
        filled = wait_for(lambda: "plus" in model_snapshots_get_all(), seconds=30)
        updated = wait_for(
            lambda: Fingerprint.objects.get(id="current").app_version == "26.800.1", seconds=30
        )

    assert filled and updated
    assert model_snapshots_get_all()["plus"]["models"][0]["id"] == "gpt-5.4"
    # sent by beat at its start, not by the hourly / 72-hour schedule
    worker_log = celery_worker.log_path.read_text()
    assert "proxy.refresh_models_at_startup[" in worker_log
    assert "proxy.update_fingerprint[" in worker_log
    model_snapshots_replace({})


def test_the_start_up_model_refresh_retries_until_a_fetch_succeeds(
    beat, upstream, appcast, celery_worker
):
    model_snapshots_replace({})
    make_pool_account("tok-retry", plan_type="pro")
    upstream.models_by_token["tok-retry"] = {"models": [{"slug": "gpt-5.4"}]}
    upstream.models_failures["tok-retry"] = 503  # the first attempt fails
    log_start = len(celery_worker.log_path.read_text())

    def new_log() -> str:
        return celery_worker.log_path.read_text()[log_start:]

    def this_start_ups_task() -> str | None:
        # The task this beat sent (a retry left over from another test is not "received" anew
        # before it).
        found = re.search(r"proxy\.refresh_models_at_startup\[([0-9a-f-]+)\] received", new_log())
        return found.group(1) if found else None

    with beat():
        assert wait_for(lambda: this_start_ups_task() is not None, seconds=30)
        task_id = this_start_ups_task()
        retried = wait_for(lambda: f"[{task_id}] retry: Retry in 10s" in new_log(), seconds=30)
        assert retried, new_log()
        assert "pro" not in model_snapshots_get_all()
        del upstream.models_failures["tok-retry"]  # the upstream is back
        succeeded = wait_for(lambda: f"[{task_id}] succeeded" in new_log(), seconds=40)

    assert succeeded, new_log()
    assert re.search(
        rf"\[{task_id}\] succeeded in [0-9.]+s: {{'refreshed': {{'pro': 1}}", new_log()
    )
    assert model_snapshots_get_all()["pro"]["models"][0]["id"] == "gpt-5.4"
    assert "start-up model refresh (attempt 2)" in new_log()
    model_snapshots_replace({})
