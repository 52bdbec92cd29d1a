"""Log lines stay in UTC though the console's zone is Asia/Shanghai: Django sets the process's
TZ to TIME_ZONE when its settings load, and logging's local time would follow it unmarked."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from zoneinfo import ZoneInfo

from django.conf import settings

from config.logging_filters import UtcFormatter
from config.run import _uvicorn_log_config


def test_the_projects_log_lines_carry_utc_times():
    for config in (settings.LOGGING, _uvicorn_log_config()):
        assert config["formatters"]["plain"]["class"] == "config.logging_filters.UtcFormatter"
    formatter = UtcFormatter(settings.LOGGING["formatters"]["plain"]["format"])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    record.created, record.msecs = 0.0, 0  # 1970-01-01 00:00 UTC

    # This process's local time is the console's zone (Django set TZ from TIME_ZONE).
    console_hour = datetime.fromtimestamp(0, ZoneInfo(settings.TIME_ZONE)).hour
    assert settings.TIME_ZONE != "UTC" and time.localtime(0).tm_hour == console_hour
    assert formatter.format(record).startswith("1970-01-01 00:00:00,000 INFO")
