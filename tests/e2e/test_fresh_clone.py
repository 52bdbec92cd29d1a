"""`make run` on a fresh clone needs no settings: with no DATABASE_URL / REDIS_URL the embedded
PostgreSQL and the password-protected embedded Redis are started, the password generated, and
the project's clients use it."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import redis

from config import embedded
from tests.conftest import run_project

pytestmark = pytest.mark.subprocess

# A process of the project started like any entry point (config.bootstrap.prepare first): it
# finds the embedded stores `prepare` left running and uses them.
PROBE = """
import os
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
import django
from config.bootstrap import prepare
prepare()
django.setup()
from django.conf import settings
from django_redis import get_redis_connection
print(settings.EMBEDDED_REDIS, settings.EMBEDDED_POSTGRES, get_redis_connection("default").ping())
"""


@pytest.fixture
def fresh_var():
    # Not under pytest's tmp_path, which other pytest sessions reset to 0700 (locking the
    # pgserver user out of its data folder).
    directory = Path(tempfile.mkdtemp(prefix="cpr-fresh-clone-"))
    yield directory
    embedded.stop_redis(directory)
    embedded.stop_postgres(directory)
    shutil.rmtree(directory, ignore_errors=True)


def test_prepare_on_a_fresh_clone_needs_no_settings_and_locks_redis(fresh_var):
    unset = {"DATABASE_URL", "REDIS_URL", "REDIS_PASSWORD", "CPR_ADMIN_DEFAULT_PASSWORD"}
    environment = {
        **{name: value for name, value in os.environ.items() if name not in unset},
        "CPR_VAR_DIR": str(fresh_var),
    }

    prepared = run_project("-m", "config.run", "prepare", environment=environment, timeout=240)
    probed = run_project("-c", PROBE, environment=environment, timeout=60)

    assert prepared.returncode == 0, prepared.stderr
    assert "Created the admin 'admin' with a generated password" in prepared.stdout
    assert probed.returncode == 0, probed.stderr
    assert probed.stdout.split() == ["True", "True", "True"]
    password_file = fresh_var / "redis" / "password"
    assert stat.S_IMODE(os.stat(password_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(fresh_var / "redis").st_mode) == 0o700
    port = embedded.embedded_redis_port(fresh_var)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()
    assert password_file.read_text().strip() not in prepared.stdout + prepared.stderr
