import logging
import time


class SkipHealthzAccessLog(logging.Filter):
    """Keep ``GET /healthz`` (polled by orchestrators every few seconds) out of the access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) >= 3 and args[2] == "/healthz")


class UtcFormatter(logging.Formatter):
    """Log times in UTC, whatever the console's time zone: Django sets the process's ``TZ`` to
    ``TIME_ZONE`` (``CONSOLE_TIME_ZONE``), and every log line would otherwise move with it,
    unmarked, while the database, Celery and the stored values stay UTC."""

    @staticmethod
    def converter(seconds: float | None = None) -> time.struct_time:  # logging's hook
        return time.gmtime(seconds)
