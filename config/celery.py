"""The Celery application: Redis broker, tasks autodiscovered from each app's ``tasks.py``."""

import os

from celery import Celery

from config.schedule import BEAT_SCHEDULE

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = BEAT_SCHEDULE
app.autodiscover_tasks()
