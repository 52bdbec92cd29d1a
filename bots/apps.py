from django.apps import AppConfig


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Support bot"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import worker_ready

        from bots.log_redaction import install_admin_secret_redaction

        install_admin_secret_redaction()
        worker_ready.connect(resume_broadcasts_when_a_worker_starts, weak=False)


def resume_broadcasts_when_a_worker_starts(sender=None, **kwargs) -> None:
    """A worker that starts may replace one that died mid-broadcast: once the dead loop's lease
    has lapsed, sweep for broadcasts without a loop, on a queue this worker consumes (so it is
    the one to pick them up). Beat runs the same sweep every minute."""
    from bots.pipeline.broadcast.jobs import RESUME_AFTER_START_SECONDS
    from bots.tasks import broadcasts_resume_task

    queues = []
    consumer = getattr(sender, "task_consumer", None)
    if consumer is not None:
        queues = [queue.name for queue in consumer.queues]
    options = {"queue": queues[0]} if queues else {}
    broadcasts_resume_task.apply_async(countdown=RESUME_AFTER_START_SECONDS, **options)
