"""The Celery application: Redis broker, tasks autodiscovered from each app's ``tasks.py``."""

import os

from celery import Celery
from celery.signals import beat_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config.schedule import BEAT_SCHEDULE, STARTUP_TASKS  # noqa: E402 - needs the settings module

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = BEAT_SCHEDULE
app.autodiscover_tasks()


@beat_init.connect
def send_startup_tasks(sender=None, **kwargs) -> None:
    """Beat is the one scheduler of the system: its start is the system's start-up."""
    for name, countdown in STARTUP_TASKS:
        app.send_task(name, countdown=countdown)
