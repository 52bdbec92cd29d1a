import logging


class SkipHealthzAccessLog(logging.Filter):
    """Keep ``GET /healthz`` (polled by orchestrators every few seconds) out of the access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) >= 3 and args[2] == "/healthz")
