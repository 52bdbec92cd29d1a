"""The Celery tasks the pipeline queues, by their registered names.

``bots.tasks`` wraps pipeline functions as tasks, so the pipeline does not import it back: it
names the task (the message contract Celery routes by) and takes the registered task object
from the project's Celery app (which imports ``bots.tasks`` when it first needs its tasks).
"""

from __future__ import annotations

from celery import current_app
from celery.app.task import Task

BROADCAST_SEND = "bots.tasks.broadcast_send_task"
PURGE_CONTINUE = "bots.tasks.purge_continue_task"
WIPE_CONTINUE = "bots.tasks.wipe_continue_task"


def registered_task(name: str) -> Task:
    """The task registered as ``name``. Raises KeyError when no such task exists."""
    return current_app.tasks[name]
