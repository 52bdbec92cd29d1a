"""The system under drill: the project's own processes (``config.run`` web, worker and beat, as
``make run`` starts them) on the drill's database and a Redis server of the drill's own (which a
part may SIGKILL and start again, empty), with the fake ChatGPT upstream and the fake Bot API
served from this process (loopback only).

Every secret the system is given is generated here and listed in ``System.secrets``, so the
secrets scan knows what to look for.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from config.embedded import free_port, redis_server_executable, redis_url
from tests.fakes.codex import FakeCodexUpstream, Reply
from tests.fakes.oauth import FakeOAuthServer
from tests.fakes.telegram import BOT_ID, FakeTelegram

ROOT = Path(__file__).resolve().parent.parent
ADMIN_ID = 111111111
# A cookie the fake upstream sets on every answer: the proxy keeps and replays it per account
# (account_cookies); it must never reach a client.
UPSTREAM_COOKIE_VALUE = "drill-cf-cookie-" + secrets.token_hex(8)


@dataclass
class Secrets:
    """Every secret value of one drill run, by kind (what the scan reports)."""

    values: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, *values: str) -> None:
        self.values.setdefault(kind, []).extend(value for value in values if value)


class DrillRedis:
    """A Redis-protocol server (the embedded default's binary) of the drill only, on a port and
    with a password of its own, nothing saved to disk: a part may kill it and start it again,
    as a Redis that died and came back empty (``restart``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.password = "drill-redis-" + secrets.token_urlsafe(16)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return redis_url(self.port, self.password)

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                redis_server_executable(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--requirepass",
                self.password,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 15
        while True:
            try:
                if redis.Redis(port=self.port, password=self.password).ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: every key (queued Celery messages, the limiter, leases, fences) is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self, *, after_seconds: float = 0.0) -> None:
        self.kill()
        time.sleep(after_seconds)
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _run(command: list[str], env: dict, *, capture: bool = True) -> str:
    done = subprocess.run(
        command, cwd=ROOT, env=env, check=False, capture_output=capture, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:4])} failed: {done.stderr[-2000:]}")
    return done.stdout


class System:
    """Start with ``start()``, stop with ``stop()``; ``log_dir`` holds every process's log."""

    def __init__(self, log_dir: Path, *, web_workers: int = 3, accounts: int = 4, cap: int = 8):
        self.log_dir = log_dir
        self.web_workers = web_workers
        self.accounts = accounts
        self.cap = cap
        self.processes: dict[str, subprocess.Popen] = {}
        self.secrets = Secrets()
        self.codex = FakeCodexUpstream()
        self.oauth = FakeOAuthServer()
        self.bot_token = f"{BOT_ID}:AAH-drill-{secrets.token_urlsafe(18)}"
        self.telegram = FakeTelegram(token=self.bot_token)
        self.webhook_secret = "drill-hook-" + secrets.token_urlsafe(16)
        self.admin_secret = "drill-admin-" + secrets.token_urlsafe(16)
        self.admin_password = "drill pass " + secrets.token_urlsafe(12)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env: dict[str, str] = {}
        self.database_url = ""
        self.redis_server = DrillRedis(log_dir / "redis")
        self.redis_url = ""
        self.key_prefix = "cprdrill:"
        self.client_key = ""
        self.admin_api_key = ""

    # ------------------------------------------------------------------ start / stop

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.codex.start()
        self.codex.default_reply = Reply(
            deltas=20, headers={"Set-Cookie": f"__cf_bm={UPSTREAM_COOKIE_VALUE}; Path=/"}
        )
        self.telegram.start()
        self.oauth.start()
        prepared = json.loads(_run([sys.executable, "-m", "drill.seed", "prepare"], os.environ))
        self.database_url = prepared["database_url"]
        self.redis_server.start()
        self.redis_url = self.redis_server.url
        self.secrets.add("redis password", self.redis_server.password)
        self.env = self._environment()
        _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], self.env)
        populated = json.loads(
            _run(
                [sys.executable, "-m", "drill.seed", "populate"]
                + ["--accounts", str(self.accounts), "--cap", str(self.cap)]
                + ["--bot-id", str(BOT_ID)],
                self.env,
            )
        )
        self.client_key, self.admin_api_key = populated["client_key"], populated["admin_api_key"]
        self.secrets.add("bot token", self.bot_token, self.bot_token.split(":", 1)[1])
        self.secrets.add("webhook secret", self.webhook_secret)
        self.secrets.add("admin secret", self.admin_secret)
        self.secrets.add("admin password", self.admin_password)
        self.secrets.add("client key", self.client_key)
        self.secrets.add("admin API key", self.admin_api_key)
        self.secrets.add("access token", *populated["access_tokens"])
        self.secrets.add("refresh token", *populated["refresh_tokens"])
        self.secrets.add("upstream cookie", UPSTREAM_COOKIE_VALUE)
        self._flush_redis()
        for name in ("web", "worker", "beat"):
            self._start_process(name)
        self.wait_healthy(timeout=180)

    def _environment(self) -> dict[str, str]:
        var_dir = self.log_dir / "var"
        var_dir.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "REDIS_KEY_PREFIX": self.key_prefix,
            "CPR_VAR_DIR": str(var_dir),
            "CPR_DATA_DIR": str(var_dir / "data"),
            "PORT": str(self.port),
            "HOST": "127.0.0.1",
            "WEB_WORKERS": str(self.web_workers),
            "CELERY_WORKER_CONCURRENCY": "1",
            "LOG_LEVEL": "info",
            "WEB_DRAIN_TIMEOUT_SECONDS": "10",
            # The bad-input part's slow-header sockets are closed after this (default 15 s).
            "WEB_HEADER_TIMEOUT_SECONDS": "5",
            "WORKER_DRAIN_TIMEOUT_SECONDS": "5",
            "CPR_ADMIN_DEFAULT_PASSWORD": self.admin_password,
            # A SIGKILLed worker's slots come back after this (the default is 300 s).
            "SCHEDULER_SLOT_TTL_SECONDS": "10",
            "SCHEDULER_WAIT_TIMEOUT_SECONDS": "30",
            "CODEX_UPSTREAM_BASE": self.codex.url,
            "OPENAI_AUTH_BASE": self.oauth.url,
            # Loopback only: the appcast check meets the fake upstream's 404.
            "CODEX_APPCAST_URL": f"{self.codex.url}/appcast.xml",
            "TELEGRAM_API_BASE": self.telegram.api_base,
            "TELEGRAM_BOT_TOKEN": self.bot_token,
            "TELEGRAM_WEBHOOK_SECRET": self.webhook_secret,
            "ADMIN_SECRET": self.admin_secret,
            "SUPPORT_CHAT_ID": str(self.telegram.support_chat_id),
            "ADMIN_IDS": str(ADMIN_ID),
            # The storm checks exactly-once effects, not Telegram's pacing (bench/ measures it).
            "MAX_MESSAGES_PER_MINUTE": "100000",
            # One update in twelve Telegram calls failing may fail one update three times.
            "MAX_ATTEMPTS": "6",
            "TELEGRAM_SENDS_PER_SECOND": "100000",
            "TELEGRAM_CHAT_INTERVAL_MS": "0",
            "TELEGRAM_GROUP_SENDS_PER_WINDOW": "100000",
        }

    def _start_process(self, name: str) -> None:
        log = open(self.log_dir / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "config.run", name],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.codex.stop()
        self.telegram.stop()
        self.oauth.stop()
        self.redis_server.stop()

    # ------------------------------------------------------------------ probes

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/healthz", timeout=2) as reply:  # noqa: S310
                return reply.status == 204
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout: float) -> float:
        """Seconds until /healthz answers 204; raises after ``timeout``."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({self.log_dir / (name + '.log')})")
            if self.healthy():
                return time.monotonic() - started
            time.sleep(0.05)
        raise RuntimeError(f"/healthz did not recover within {timeout} s")

    def restart_process(self, name: str) -> None:
        """SIGKILL ``name`` (web, worker or beat) with all its children, then start it again."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self._start_process(name)

    def restart_exited(self) -> list[str]:
        """Start again the processes that exited (compose's ``restart: unless-stopped``);
        their names."""
        exited = [name for name, process in self.processes.items() if process.poll() is not None]
        for name in exited:
            self._start_process(name)
        return exited

    def web_worker_pids(self) -> list[int]:
        """The uvicorn worker processes of web (children of its supervisor, not the
        multiprocessing resource tracker)."""
        supervisor = psutil.Process(self.processes["web"].pid)
        workers = []
        for child in supervisor.children():
            try:
                if "spawn_main" in " ".join(child.cmdline()):
                    workers.append(child.pid)
            except psutil.NoSuchProcess:
                continue
        return sorted(workers)

    def wait_for_replacement(self, gone: int, count: int, timeout: float = 90) -> float:
        """Seconds until worker ``gone`` has exited and web has ``count`` workers again (the
        uvicorn supervisor starts a new one for a dead one)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            workers = self.web_worker_pids()
            if gone not in workers and len(workers) >= count:
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"web did not get back to {count} workers within {timeout} s")

    # ------------------------------------------------------------------ the stores

    def redis(self):
        import redis

        return redis.Redis.from_url(self.redis_url)

    def _flush_redis(self) -> None:
        client = self.redis()
        try:
            client.flushdb()
        finally:
            client.close()

    def postgres(self):
        import psycopg

        return psycopg.connect(self.database_url, autocommit=True)

    def log_files(self) -> list[Path]:
        return sorted(self.log_dir.glob("*.log"))
