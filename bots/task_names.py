"""The names of the bot's Celery tasks, for the code that queues them.

The pipeline queues its continuations by name (``celery.current_app.send_task``) rather than by
importing ``bots.tasks``: the task module imports the pipeline to run it, and an import back
would make a cycle. ``bots.tasks`` declares each task under the same constant.
"""

from __future__ import annotations

PURGE_CONTINUE_TASK = "bots.tasks.purge_continue_task"
WIPE_CONTINUE_TASK = "bots.tasks.wipe_continue_task"
BROADCAST_SEND_TASK = "bots.tasks.broadcast_send_task"
ALBUM_FLUSH_TASK = "bots.tasks.album_flush_task"
INBOX_DRAIN_TASK = "bots.tasks.inbox_drain_task"
