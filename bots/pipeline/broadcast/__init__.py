"""/broadcast (spec §7): ``creation`` (the command: preview and control message), ``callbacks``
(the buttons: the state machine), ``sending`` (the paced, resumable send loop run by Celery),
``jobs`` (queueing and resuming it), ``display`` (what the control message shows), ``console``
(stopping one from the Django admin), ``compose`` (the announcement's HTML)."""
