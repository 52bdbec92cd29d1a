"""What `make run` (``config.run all``) prints once ready and on Ctrl-C, for the states a real
run in tests/e2e/test_run_command.py does not reach (that run has an external database and a
configured password): the generated password's file, the embedded stores left running, a
server bound to every address. The password itself is never in the banner."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.run_messages import (
    READY_SIGNAL_DIRECTORY,
    mark_ready,
    not_ready,
    ready_banner,
    stopped_notice,
    stopping_notice,
)

GENERATED_PASSWORD = "Zq8-generated-once-3Xk"


@pytest.fixture
def fresh_clone(settings, tmp_path):
    """The settings of `make run` on a fresh machine: embedded stores, a generated password."""
    password_file = tmp_path / "admin-password.txt"
    password_file.write_text(GENERATED_PASSWORD + "\n")
    settings.VAR_DIR = tmp_path
    settings.GENERATED_ADMIN_PASSWORD_FILE = password_file
    settings.CPR_ADMIN_DEFAULT_PASSWORD = None
    settings.EMBEDDED_POSTGRES = settings.EMBEDDED_REDIS = True
    settings.HOST, settings.PORT = "127.0.0.1", 8000
    settings.CPR_ADMIN_USERNAME = "admin"
    return settings


def test_the_ready_banner_says_where_the_generated_password_is_not_what_it_is(fresh_clone):
    banner = ready_banner(fresh_clone, waiting_for=[])

    path = fresh_clone.GENERATED_ADMIN_PASSWORD_FILE
    assert banner == (
        "\n  Ready: web, worker and beat are running.\n"
        "  Django admin:    http://127.0.0.1:8000/admin/   (user 'admin')\n"
        f"  Admin password:  in {path} (generated on the first start; the file goes when the "
        "password is changed)\n"
        "  Health:          http://127.0.0.1:8000/healthz\n"
        "  Stop:            Ctrl-C stops web, worker and beat.\n"
        "                   The embedded PostgreSQL and Redis keep running for the next start "
        f"(data in {fresh_clone.VAR_DIR}); `make stop-embedded` (or `python -m config.run "
        "stop-embedded`) stops them, keeping the data.\n"
    )
    assert GENERATED_PASSWORD not in banner


@pytest.mark.parametrize(
    ("configured", "hint"),
    [
        ("a configured passphrase", "the value of CPR_ADMIN_DEFAULT_PASSWORD, unless it was"),
        (None, "the one last set (a new one: manage.py set_admin_password)"),
    ],
)
def test_without_the_file_the_banner_says_which_password_applies(fresh_clone, configured, hint):
    # The file goes once the password is changed (or was never written: a configured one).
    Path(fresh_clone.GENERATED_ADMIN_PASSWORD_FILE).unlink()
    fresh_clone.CPR_ADMIN_DEFAULT_PASSWORD = configured

    banner = ready_banner(fresh_clone, waiting_for=[])

    assert f"  Admin password:  {hint}" in banner
    assert configured is None or configured not in banner


@pytest.mark.parametrize(
    ("host", "base"),
    [
        ("0.0.0.0", "http://127.0.0.1:8080"),
        ("::", "http://127.0.0.1:8080"),
        ("10.1.2.3", "http://10.1.2.3:8080"),
        ("::1", "http://[::1]:8080"),
    ],
)
def test_the_admin_address_is_one_this_machine_can_open(fresh_clone, host, base):
    fresh_clone.HOST, fresh_clone.PORT = host, 8080

    banner = ready_banner(fresh_clone, waiting_for=[])

    assert f"  Django admin:    {base}/admin/   (user 'admin')\n" in banner
    assert f"  Health:          {base}/healthz\n" in banner


def test_a_process_still_starting_after_the_wait_is_named(fresh_clone):
    banner = ready_banner(fresh_clone, waiting_for=["worker", "beat"])

    assert banner.startswith(
        "\n  Still starting after 2 minutes: worker, beat (the rest is running).\n"
    )


def test_ctrl_c_says_the_embedded_stores_keep_running_and_how_to_stop_them(fresh_clone):
    fresh_clone.WEB_DRAIN_TIMEOUT_SECONDS, fresh_clone.WORKER_DRAIN_TIMEOUT_SECONDS = 25, 20

    assert stopping_notice(fresh_clone) == (
        "\n  Stopping web, worker and beat (requests and jobs in flight get up to 25 s; "
        "a second Ctrl-C cuts the wait short)."
    )
    assert stopped_notice(fresh_clone) == (
        "\n  Stopped web, worker and beat. The embedded PostgreSQL and Redis keep running for "
        f"the next start (data in {fresh_clone.VAR_DIR}); `make stop-embedded` (or `python -m "
        "config.run stop-embedded`) stops them, keeping the data.\n"
    )


def test_ctrl_c_with_one_store_embedded_names_each(fresh_clone):
    fresh_clone.EMBEDDED_POSTGRES = False

    notice = stopped_notice(fresh_clone)

    assert "The embedded Redis keeps running for the next start" in notice
    assert "stops it, keeping the data." in notice
    assert notice.endswith(
        "External PostgreSQL (DATABASE_URL): not ours to stop, left as they are.\n"
    )


def test_worker_and_beat_mark_their_start_only_under_run_all(monkeypatch, tmp_path):
    monkeypatch.delenv(READY_SIGNAL_DIRECTORY, raising=False)
    mark_ready("worker")  # run on its own: nothing to tell
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setenv(READY_SIGNAL_DIRECTORY, str(tmp_path))
    assert not_ready(tmp_path) == ["worker", "beat"]
    mark_ready("worker")
    assert not_ready(tmp_path) == ["beat"]
    mark_ready("beat")
    assert not_ready(tmp_path) == []
