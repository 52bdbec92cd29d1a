"""The admin audit trail: a table beside the seed's eight (issue #24)."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from bots.models.constraints import column_check


class AuditSurface(models.TextChoices):
    TELEGRAM = "telegram"  # an admin command or a button in the support group
    CONSOLE = "console"  # the operators' console (Django admin)


class AuditAction(models.TextChoices):
    BAN = "ban"
    UNBAN = "unban"
    NOTE = "note"
    UNNOTE = "unnote"
    RISK = "risk"
    UNRISK = "unrisk"
    ARCHIVE = "archive"
    DELETE_USER = "delete_user"
    PURGE = "purge"
    WIPE = "wipe"
    BROADCAST = "broadcast"
    VERIFICATION = "verification"  # a verification switch (on/off, mode)


class AuditOutcome(models.TextChoices):
    DONE = "done"
    STARTED = "started"  # a long job began (a purge handed to Celery, a broadcast confirmed)
    REQUESTED = "requested"  # a confirmation prompt was posted (/deluser, /wipealldata)
    CANCELLED = "cancelled"
    REFUSED = "refused"  # nothing done: no user, busy, missing keys, ...
    FAILED = "failed"  # Telegram or the database refused part of it


class AdminAuditEntry(models.Model):
    """``admin_audit_log``: one admin action, from Telegram or the console — who, when, which
    user, the outcome. A table of its own beside the seed's eight (they stay as the seed
    says); rows older than AUDIT_RETENTION_DAYS are trimmed daily. Telegram's redelivery of an
    update writes no second row (unique per update and action), nor does a job's end that is
    recorded twice (unique per job, ``outcome_of``)."""

    id = models.BigAutoField(primary_key=True)
    bot_id = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())
    surface = models.TextField(choices=AuditSurface.choices)
    actor_id = models.BigIntegerField(null=True, blank=True)  # the admin's Telegram id
    actor_name = models.TextField(db_default="")  # console username, or the admin's @username
    action = models.TextField(choices=AuditAction.choices)
    target_user_id = models.BigIntegerField(null=True, blank=True)
    outcome = models.TextField(choices=AuditOutcome.choices)
    detail = models.TextField(db_default="")
    source_update_id = models.BigIntegerField(null=True, blank=True)
    # The job whose end this row records ("purge:<id>", "wipe:<id>", "broadcast:<id>"; "" for
    # every other row): a job that ended outside the admin's click has one outcome row, even
    # when its last step runs twice (a worker that died before it could say it had finished).
    outcome_of = models.TextField(db_default="", blank=True)

    class Meta:
        db_table = "admin_audit_log"
        verbose_name = "admin action"
        verbose_name_plural = "audit trail"
        constraints = [
            column_check("admin_audit_log", "surface", Q(surface__in=AuditSurface.values)),
            column_check("admin_audit_log", "action", Q(action__in=AuditAction.values)),
            column_check("admin_audit_log", "outcome", Q(outcome__in=AuditOutcome.values)),
            models.UniqueConstraint(
                fields=["bot_id", "source_update_id", "action"],
                condition=Q(source_update_id__isnull=False),
                name="admin_audit_log_update_action_key",
            ),
            models.UniqueConstraint(
                fields=["bot_id", "outcome_of"],
                condition=~Q(outcome_of=""),
                name="admin_audit_log_outcome_of_key",
            ),
        ]
        indexes = [
            models.Index(fields=["bot_id", "created_at"], name="idx_audit_bot_created"),
            models.Index(fields=["bot_id", "target_user_id"], name="idx_audit_bot_target"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.outcome} ({self.surface})"
