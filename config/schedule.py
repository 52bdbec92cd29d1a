"""The Celery beat schedule: every periodic job of the project, in one place.

Entries name tasks by their dotted path so this module imports no app. Each issue that adds a
periodic job adds its entry here (and documents it in the README's "Periodic jobs" table).
"""

from celery.schedules import crontab  # noqa: F401 - used by entries as they are added

BEAT_SCHEDULE: dict[str, dict] = {}
