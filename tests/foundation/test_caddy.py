"""Finding 8 and HSTS, through the real Caddy of docker-compose's `tls` profile
(deploy/Caddyfile) in front of the real project: a CF-Connecting-IP sent by a client is stripped
unless TRUST_CF_CONNECTING_IP is on, and every answer carries Strict-Transport-Security.

Needs the ``caddy`` binary (Debian's package; .ci/run installs it and sets REQUIRE_CADDY=1, so a
missing Caddy fails CI instead of skipping)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from config.embedded import free_port
from proxy.models import AdminLoginEvent
from tests.proxy.conftest import LiveServer

CADDYFILE = Path(__file__).parents[2] / "deploy" / "Caddyfile"
_CSRF = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')


def _caddy_binary() -> str:
    binary = shutil.which("caddy")
    if binary is None:
        if os.environ.get("REQUIRE_CADDY") == "1":
            pytest.fail("REQUIRE_CADDY=1 but no caddy binary on PATH (apt-get install caddy)")
        pytest.skip("caddy is not installed: the Caddyfile's header rules were NOT checked")
    return binary


class Caddy:
    """deploy/Caddyfile adapted with the given environment, run with its admin API off."""

    def __init__(self, directory: Path, *, upstream_port: int, trust_cf: bool):
        binary = _caddy_binary()
        self.port = free_port()
        environment = {
            **os.environ,
            "PUBLIC_HOST": f"http://127.0.0.1:{self.port}",
            "CPR_WEB_UPSTREAM": f"127.0.0.1:{upstream_port}",
            "TRUST_CF_CONNECTING_IP": "true" if trust_cf else "false",
            "XDG_DATA_HOME": str(directory),
            "XDG_CONFIG_HOME": str(directory),
        }
        adapted = subprocess.run(
            [binary, "adapt", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        config = json.loads(adapted.stdout)
        config["admin"] = {"disabled": True}
        config_path = directory / "caddy.json"
        config_path.write_text(json.dumps(config))
        self.process = subprocess.Popen(
            [binary, "run", "--config", str(config_path)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                requests.get(f"{self.url}/healthz", timeout=1)
                return
            except requests.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("caddy did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture(scope="module")
def project(django_db_setup, django_db_blocker):
    live = LiveServer()
    yield live
    live.stop()


def _failed_log_in_through(caddy: Caddy, **headers: str) -> requests.Response:
    session = requests.Session()
    page = session.get(f"{caddy.url}/admin/login/", timeout=30)
    token = _CSRF.search(page.content).group(1).decode()
    return session.post(
        f"{caddy.url}/admin/login/",
        data={"csrfmiddlewaretoken": token, "username": "nobody", "password": "wrong guess"},
        headers=headers,
        allow_redirects=False,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("caddy_trusts_cf", "project_trusts_cf", "seen_client"),
    [
        # Caddy strips it by itself, even if the project were told to believe it.
        (False, True, "127.0.0.1"),
        # The project ignores it unless told to believe it.
        (True, False, "127.0.0.1"),
        # Both on (Cloudflare in front): the header names the client.
        (True, True, "203.0.113.66"),
    ],
)
def test_a_client_cf_connecting_ip_is_believed_only_when_cloudflare_is_trusted(
    project, transactional_db, settings, tmp_path, caddy_trusts_cf, project_trusts_cf, seen_client
):
    from ipaddress import ip_network

    settings.TRUSTED_PROXIES = [ip_network("127.0.0.1/32")]
    settings.TRUST_CF_CONNECTING_IP = project_trusts_cf
    caddy = Caddy(tmp_path, upstream_port=project.port, trust_cf=caddy_trusts_cf)
    try:
        answer = _failed_log_in_through(caddy, **{"CF-Connecting-IP": "203.0.113.66"})
    finally:
        caddy.stop()

    assert answer.status_code == 200  # the form again, with its error
    assert answer.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    [event] = AdminLoginEvent.objects.all()
    # Without trust the spoofed address is gone and Caddy's X-Forwarded-For names the client.
    assert event.client_ip == seen_client
