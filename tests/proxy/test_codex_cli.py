"""The Codex CLI end to end: ``codex exec`` through the proxy, as a developer would run it.

The CLI (npm ``@openai/codex``, pinned) is installed once into ``var/tools/codex-cli`` and reused.
Without npm the check cannot run: it is reported as skipped with the reason, and is an error
when REQUIRE_CODEX_CLI=1 (as in CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from proxy import identity
from proxy.v1.websocket import ResponsesSocket
from telemetry.models import UsageRecord
from tests.proxy.conftest import make_pool_account

CODEX_CLI_VERSION = "0.171.0"

# One xdist worker runs them all: the session fixture installs the CLI into the one shared
# var/tools folder, which two workers installing at once would corrupt.
pytestmark = [pytest.mark.subprocess, pytest.mark.xdist_group("codex-cli")]


@pytest.fixture(scope="session")
def codex_cli() -> str:
    prefix = settings.VAR_DIR / "tools" / "codex-cli"
    binary = prefix / "node_modules" / ".bin" / "codex"
    version_file = prefix / "installed-version"
    if binary.exists() and version_file.exists() and version_file.read_text() == CODEX_CLI_VERSION:
        return str(binary)
    npm = shutil.which("npm")
    if npm is None:
        message = "Codex CLI check NOT RUN: npm is not installed (Node.js 18+ with npm is needed)"
        if os.environ.get("REQUIRE_CODEX_CLI") == "1":
            pytest.fail(message)
        pytest.skip(message)
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            f"@openai/codex@{CODEX_CLI_VERSION}",
            "--no-audit",
            "--no-fund",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    version_file.write_text(CODEX_CLI_VERSION)
    _wait_until_it_runs(binary)
    return str(binary)


def _wait_until_it_runs(binary: Path) -> None:
    """Right after ``npm install`` the CLI's native binary may still be open for writing by a
    process the install left behind: spawning it then fails with ETXTBSY (a clean CI run saw
    its first three tests fail so). Wait until ``codex --version`` runs, at most a minute."""
    deadline = time.monotonic() + 60
    while True:
        probe = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode == 0 or "ETXTBSY" not in probe.stderr:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the Codex CLI still cannot be started: {probe.stderr[-500:]}")
        time.sleep(0.5)


def _codex_environment(proxy, client_key, tmp_path, *, websockets: bool = False) -> dict:
    """A CODEX_HOME whose provider is the proxy (its WebSocket when ``websockets``)."""
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""
model = "gpt-5.4"
model_provider = "cpr"

[model_providers.cpr]
name = "Codex Proxy"
base_url = "{proxy.url}/v1"
env_key = "CPR_API_KEY"
wire_api = "responses"
supports_websockets = {"true" if websockets else "false"}
"""
    )
    return {**os.environ, "CODEX_HOME": str(codex_home), "CPR_API_KEY": client_key.key}


def _codex(codex_cli, tmp_path, environment, *arguments):
    return subprocess.run(
        [codex_cli, "exec", "--skip-git-repo-check", *arguments],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("websockets", [True, False], ids=["client-websocket", "client-http"])
def test_codex_exec_multi_turn_session_through_the_proxy(
    codex_cli, proxy, upstream, client_key, tmp_path, websockets, monkeypatch
):
    make_pool_account("tok-cli")
    environment = _codex_environment(proxy, client_key, tmp_path, websockets=websockets)
    # The proxy serves in this process: count the requests its client WebSocket answers.
    socket_requests = []
    answer = ResponsesSocket._answer

    async def counted(self, data, *following):
        socket_requests.append(data)
        await answer(self, data, *following)

    monkeypatch.setattr(ResponsesSocket, "_answer", counted)

    first = _codex(codex_cli, tmp_path, environment, "Say hello in one line")
    second = _codex(codex_cli, tmp_path, environment, "resume", "--last", "And once more")

    assert first.returncode == 0, first.stderr[-2000:]
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Hello from the fake upstream." in first.stdout
    assert "Hello from the fake upstream." in second.stdout
    sent = upstream.responses_requests()
    assert len(sent) >= 2
    assert len(socket_requests) == (len(sent) if websockets else 0)
    last = sent[-1].json()
    # The follow-up carries the session: the earlier turn in its input, or a continuation of it.
    assert "And once more" in str(last["input"])
    assert "Say hello in one line" in str(last["input"]) or last.get("previous_response_id")
    proxy.drain()
    records = list(UsageRecord.objects.order_by("created_at"))
    assert len(records) == len(sent)
    assert {record.transport for record in records} == {"websocket"}
    assert {record.client_api_key_id for record in records} == {client_key.id}


def test_codex_exec_completes_through_the_proxy(codex_cli, proxy, upstream, client_key, tmp_path):
    make_pool_account("tok-cli")
    environment = _codex_environment(proxy, client_key, tmp_path)

    result = subprocess.run(
        [codex_cli, "exec", "--skip-git-repo-check", "Say hello in one line"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert result.returncode == 0, result.stderr[-2000:]
    assert "Hello from the fake upstream." in result.stdout
    [sent] = upstream.responses_requests()
    body = sent.json()
    assert body["model"] == "gpt-5.4" and body["stream"] is True
    assert any("Say hello in one line" in str(item) for item in body["input"])
    proxy.drain()
    record = UsageRecord.objects.get()
    assert (record.route, record.client_api_key_id, record.message) == (
        "/v1/responses",
        client_key.id,
        "v1 responses stream completed",
    )
    assert record.output_tokens == 5


@pytest.mark.parametrize("websockets", [True, False], ids=["client-websocket", "client-http"])
def test_the_codex_clis_own_ids_never_reach_an_account(
    codex_cli, proxy, upstream, client_key, tmp_path, websockets
):
    account = make_pool_account("tok-cli")
    environment = _codex_environment(proxy, client_key, tmp_path, websockets=websockets)

    result = _codex(codex_cli, tmp_path, environment, "--json", "Say hello in one line")

    assert result.returncode == 0, result.stderr[-2000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    [thread_id] = [event["thread_id"] for event in events if event["type"] == "thread.started"]
    installation_id = (tmp_path / "codex-home" / "installation_id").read_text().strip()
    assert thread_id and installation_id
    sent = upstream.responses_requests()
    assert sent
    for request in sent:
        text = "\n".join(
            [value for _, value in request.headers]
            + [request.body.decode(), json.dumps(request.extra.get("frame"))]
        )
        assert installation_id not in text and thread_id not in text
        assert request.header("x-codex-installation-id") == identity.installation_id(account.id)
        body = request.extra.get("frame") or request.json()
        metadata = body["client_metadata"]
        assert metadata["x-codex-installation-id"] == identity.installation_id(account.id)
        assert metadata["session_id"] == request.header("session-id")
        assert json.loads(metadata["x-codex-turn-metadata"])["installation_id"] == (
            identity.installation_id(account.id)
        )
