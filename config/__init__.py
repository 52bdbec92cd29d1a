# Before anything else of the project runs: Python 3.12's asyncio.wait_for on 3.11, whose own
# can swallow a cancellation (common/asyncio_compat.py). Every process on these settings (web,
# worker, beat, manage.py, the tests) imports this package first.
from common import asyncio_compat

asyncio_compat.install()

from config.celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
