"""The bot through the real web process (uvicorn, ASGI, the DRF view in a worker thread) against
the fake Bot API: setwebhook behind an https proxy, then a first contact, the challenge, the
verification and a relayed message — all over HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

from config.embedded import free_port
from tests.bots.conftest import ADMIN_SECRET, WEBHOOK_SECRET
from tests.bots.helpers import solve_challenge
from tests.conftest import PROJECT_ROOT, project_environment, run_project

pytestmark = pytest.mark.subprocess


def _environment(database_url: str, tmp_path: Path, telegram, port: int) -> dict[str, str]:
    return project_environment(
        database_url,
        tmp_path,
        REDIS_KEY_PREFIX=f"{settings.REDIS_KEY_PREFIX}bot-web:",
        CPR_ADMIN_DEFAULT_PASSWORD="bot web test passphrase",
        PORT=str(port),
        WEB_WORKERS="1",
        TRUSTED_PROXIES="127.0.0.1",
        TELEGRAM_API_BASE=telegram.api_base,
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
        ADMIN_SECRET=ADMIN_SECRET,
        SUPPORT_CHAT_ID=str(telegram.support_chat_id),
        ADMIN_IDS="111111111",
    )


def _wait_for_health(base: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            if requests.get(f"{base}/telegram/health", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError("the web process did not answer /telegram/health")


def test_the_web_process_serves_the_bot_end_to_end(scratch_database, tmp_path, telegram):
    port = free_port()
    environment = _environment(scratch_database, tmp_path, telegram, port)
    prepared = run_project("-m", "config.run", "prepare", environment=environment, timeout=180)
    assert prepared.returncode == 0, prepared.stderr
    web = subprocess.Popen(
        [sys.executable, "-m", "config.run", "web"],
        cwd=PROJECT_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    hook = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
    try:
        _wait_for_health(base, web)
        # The TLS proxy in front of web tells it the request came over https.
        bound = requests.get(
            f"{base}/telegram/setwebhook/{ADMIN_SECRET}",
            headers={"X-Forwarded-Proto": "https"},
            timeout=30,
        )
        assert bound.status_code == 200, bound.text
        telegram.fail("getMe", status=500)
        refused = requests.get(
            f"{base}/telegram/setwebhook/{ADMIN_SECRET}",
            headers={"X-Forwarded-Proto": "https"},
            timeout=30,
        )
        assert refused.status_code == 502  # logged by Django as an error, with its path
        assert telegram.webhook["url"] == f"https://127.0.0.1:{port}/telegram/webhook"

        user = telegram.user(4321, "Frank")
        first = requests.post(
            f"{base}/telegram/webhook",
            json=telegram.private_message(user, text="hello"),
            headers=hook,
            timeout=30,
        )
        assert (first.status_code, first.json()) == (200, {"status": "ok"})
        challenge = telegram.bot_messages(user.id)[-1]
        answer = solve_challenge(challenge.text)
        click = telegram.click(user, message_id=challenge.message_id, data=f"v:{answer}")
        assert requests.post(f"{base}/telegram/webhook", json=click, headers=hook, timeout=30).ok
        assert telegram.callback_answer(click["callback_query"]["id"]) == "验证通过！"

        relayed = requests.post(
            f"{base}/telegram/webhook",
            json=telegram.private_message(user, text="relay me"),
            headers=hook,
            timeout=30,
        )
        assert relayed.status_code == 200
        [topic] = telegram.topics()
        assert [m.text for m in telegram.topic_messages(topic.thread_id)][-1] == "relay me"
        unauthorized = requests.post(
            f"{base}/telegram/webhook", json={"update_id": 1}, headers={}, timeout=10
        )
        assert (unauthorized.status_code, unauthorized.json()) == (401, {"error": "unauthorized"})
    finally:
        web.terminate()
        output = web.communicate(timeout=30)[0]
    assert "GET /telegram/setwebhook/<redacted> HTTP/1.1" in output  # the access log
    assert "Bad Gateway: /telegram/setwebhook/<redacted>" in output  # django.request
    assert telegram.token not in output
    assert WEBHOOK_SECRET not in output
    assert ADMIN_SECRET not in output
