"""The Celery application: Redis broker, tasks autodiscovered from each app's ``tasks.py``."""

import os
import signal
import sys
import threading

from celery import Celery
from celery.signals import beat_init, worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config.bootstrap import prepare  # noqa: E402
from config.run_messages import mark_ready  # noqa: E402


def _started_by_the_celery_command() -> bool:
    """Whether this process is ``celery -A config …`` (``python -m celery`` included), for which
    this module is the entry point; any other importer of ``config`` prepares for itself."""
    program = sys.argv[0] if sys.argv else ""
    return os.path.basename(program) == "celery" or program.endswith("celery/__main__.py")


if _started_by_the_celery_command():
    prepare()  # a no-op under config.run, which prepared the environment this process inherited

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect(weak=False)
def install_beat_schedule(sender: Celery, **kwargs) -> None:
    """The beat schedule reads settings, so it is installed when the app's configuration is
    first read, not when ``config`` is imported (importing reads no settings)."""
    from config.schedule import BEAT_SCHEDULE

    sender.conf.beat_schedule = BEAT_SCHEDULE


@beat_init.connect
def send_startup_tasks(sender=None, **kwargs) -> None:
    """Beat is the one scheduler of the system: its start is the system's start-up."""
    from config.schedule import STARTUP_TASKS

    for name, countdown in STARTUP_TASKS:
        app.send_task(name, countdown=countdown)
    mark_ready("beat")  # `make run`'s ready banner waits for it (config/run_messages.py)


@worker_ready.connect
def tell_run_all_the_worker_started(**_) -> None:
    """`make run`'s ready banner waits for this (after the worker's own banner)."""
    mark_ready("worker")


@worker_shutting_down.connect
def hand_back_unfinished_jobs_after_the_drain(how: str, **_) -> None:
    """SIGTERM (and Ctrl-C) start Celery's warm shutdown: no new jobs, running ones finish and
    the worker exits as soon as they have. A job still running after WORKER_DRAIN_TIMEOUT_SECONDS
    is handed back instead: SIGQUIT turns the stop into Celery's cold shutdown, which cancels it
    and, its message not being acknowledged yet (acks_late), returns it to the queue for the next
    worker, rather than waiting for compose's SIGKILL, after which Redis would hold the message
    back for the whole visibility timeout (1 h)."""
    if how != "Warm":
        return
    from django.conf import settings

    timer = threading.Timer(
        settings.WORKER_DRAIN_TIMEOUT_SECONDS, os.kill, (os.getpid(), signal.SIGQUIT)
    )
    timer.daemon = True
    timer.start()
