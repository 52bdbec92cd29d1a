"""The eight tables of the seed's storage document ("数据表"), as the seed lists them."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from bots.models.constraints import column_check


class Bot(models.Model):
    """``bots``: the bot's identity, written by setwebhook from getMe."""

    bot_id = models.BigIntegerField(primary_key=True)
    username = models.TextField(db_default="")
    display_name = models.TextField(db_default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "bots"

    def __str__(self) -> str:
        return f"@{self.username}" if self.username else str(self.bot_id)


class UserStatus(models.TextChoices):
    ACTIVE = "active"
    # /archive's soft archive; back to active once the user passes verification again.
    DELETED = "deleted"


class BotUser(models.Model):
    """``users``: a Telegram user's profile, verification, challenge fence and throttles."""

    pk = models.CompositePrimaryKey("bot_id", "user_id")
    bot_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    first_name = models.TextField(db_default="")
    last_name = models.TextField(db_default="")
    username = models.TextField(db_default="")
    status = models.TextField(choices=UserStatus.choices, db_default=UserStatus.ACTIVE)
    is_banned = models.BooleanField(db_default=False)
    is_risk = models.BooleanField(db_default=False)
    is_verified = models.BooleanField(db_default=False)
    verified_at = models.DateTimeField(null=True, blank=True)
    # The pending challenge ("fence", spec §5.3): all six columns NULL = no valid challenge.
    verify_answer = models.IntegerField(null=True, blank=True)
    verify_msg_id = models.BigIntegerField(null=True, blank=True)
    verify_request_hash = models.TextField(null=True, blank=True)
    verify_request_expires_at = models.DateTimeField(null=True, blank=True)
    verify_request_generation = models.BigIntegerField(null=True, blank=True)
    verify_submit_not_before = models.DateTimeField(null=True, blank=True)
    rate_window_start = models.DateTimeField(null=True, blank=True)
    rate_count = models.IntegerField(db_default=0)
    last_notice_at = models.DateTimeField(null=True, blank=True)
    risk_notice_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "users"
        verbose_name = "user"
        constraints = [column_check("users", "status", Q(status__in=UserStatus.values))]

    def __str__(self) -> str:
        return f"{self.first_name or self.username or self.user_id} ({self.user_id})"


class TopicStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class Topic(models.Model):
    """``topics``: the user ↔ forum topic binding, unique in both directions."""

    pk = models.CompositePrimaryKey("bot_id", "user_id")
    bot_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    thread_id = models.BigIntegerField()
    title = models.TextField(db_default="")
    status = models.TextField(choices=TopicStatus.choices, db_default=TopicStatus.OPEN)
    pinned_msg_id = models.BigIntegerField(null=True, blank=True)
    note = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "topics"
        constraints = [
            models.UniqueConstraint(
                fields=["bot_id", "thread_id"], name="topics_bot_id_thread_id_key"
            ),
            column_check("topics", "status", Q(status__in=TopicStatus.values)),
        ]

    def __str__(self) -> str:
        return f"{self.title} (thread {self.thread_id})"


class Direction(models.TextChoices):
    IN = "in"  # user → group
    OUT = "out"  # group → user


class RelayedMessage(models.Model):
    """``messages``: the ledger of relayed messages (source of /purgemsg)."""

    id = models.BigAutoField(primary_key=True)
    bot_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    thread_id = models.BigIntegerField()
    direction = models.TextField(choices=Direction.choices)
    group_msg_id = models.BigIntegerField(null=True, blank=True)
    private_msg_id = models.BigIntegerField(null=True, blank=True)
    content_type = models.TextField(db_default="text")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "messages"
        verbose_name = "relayed message"
        constraints = [column_check("messages", "direction", Q(direction__in=Direction.values))]
        indexes = [
            models.Index(fields=["thread_id", "created_at"], name="idx_messages_thread_created"),
            models.Index(fields=["user_id", "created_at"], name="idx_messages_user_created"),
        ]

    def __str__(self) -> str:
        return f"{self.direction} {self.content_type} user {self.user_id}"


class Setting(models.Model):
    """``settings``: runtime switches (verify_enabled, verify_mode, verify_generation).

    One global set per database, without bot_id, as the seed says.
    """

    key = models.TextField(primary_key=True)
    value = models.TextField()

    class Meta:
        db_table = "settings"

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class UpdateStatus(models.TextChoices):
    PROCESSING = "processing"
    PROCESSED = "processed"
    FAILED = "failed"


class ProcessedUpdate(models.Model):
    """``processed_updates``: the idempotency claim of one Telegram update (spec §6)."""

    pk = models.CompositePrimaryKey("bot_id", "update_id")
    bot_id = models.BigIntegerField()
    update_id = models.BigIntegerField()
    status = models.TextField(choices=UpdateStatus.choices)
    attempts = models.IntegerField(db_default=0)
    # The latest claim (refreshed by every take-over), not the first delivery.
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "processed_updates"
        constraints = [
            column_check("processed_updates", "status", Q(status__in=UpdateStatus.values))
        ]

    def __str__(self) -> str:
        return f"update {self.update_id}: {self.status}"


class ConfirmationStatus(models.TextChoices):
    PENDING = "pending"
    CANCELLED = "cancelled"
    CONFIRMED = "confirmed"


class DeleteConfirmation(models.Model):
    """``delete_confirmations``: one /deluser confirmation prompt (written by a later issue)."""

    pk = models.CompositePrimaryKey("bot_id", "prompt_msg_id")
    bot_id = models.BigIntegerField()
    prompt_msg_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    thread_id = models.BigIntegerField()
    # Epoch seconds (the same number travels in the callback payload), not a timestamp column.
    started_at = models.BigIntegerField()
    status = models.TextField(
        choices=ConfirmationStatus.choices, db_default=ConfirmationStatus.PENDING
    )
    confirm_callback_id = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "delete_confirmations"
        constraints = [
            column_check("delete_confirmations", "status", Q(status__in=ConfirmationStatus.values))
        ]

    def __str__(self) -> str:
        return f"delete user {self.user_id}: {self.status}"


class BroadcastStatus(models.TextChoices):
    PREPARING = "preparing"
    PENDING = "pending"
    SENDING = "sending"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    FAILED = "failed"


class Broadcast(models.Model):
    """``broadcasts``: one /broadcast task, alive only while it runs (bots.services.broadcasts)."""

    id = models.BigAutoField(primary_key=True)
    bot_id = models.BigIntegerField()
    source_update_id = models.BigIntegerField()
    initiator_user_id = models.BigIntegerField()
    support_chat_id = models.BigIntegerField()
    preview_msg_id = models.BigIntegerField(null=True, blank=True)
    control_msg_id = models.BigIntegerField(null=True, blank=True)
    message_html = models.TextField()
    # The seed keeps the frozen recipient list as JSON text (decoded fail-closed before sending).
    recipient_ids_json = models.TextField(db_default="[]")
    status = models.TextField(choices=BroadcastStatus.choices, db_default=BroadcastStatus.PREPARING)
    expected_count = models.IntegerField(db_default=0)
    success_count = models.IntegerField(db_default=0)
    failure_count = models.IntegerField(db_default=0)
    expires_at = models.DateTimeField()
    confirmed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "broadcasts"
        constraints = [
            models.UniqueConstraint(
                fields=["bot_id", "source_update_id"],
                name="broadcasts_bot_id_source_update_id_key",
            ),
            # At most one sending broadcast per bot: the pending → sending claim is decided here.
            models.UniqueConstraint(
                fields=["bot_id"],
                condition=Q(status=BroadcastStatus.SENDING),
                name="idx_broadcasts_active_sending",
            ),
            # At most one draft (preparing or pending) per bot; it may coexist with a sending one.
            models.UniqueConstraint(
                fields=["bot_id"],
                condition=Q(status__in=[BroadcastStatus.PREPARING, BroadcastStatus.PENDING]),
                name="idx_broadcasts_active_draft",
            ),
            column_check("broadcasts", "status", Q(status__in=BroadcastStatus.values)),
            column_check("broadcasts", "expected_count", Q(expected_count__gte=0)),
            column_check("broadcasts", "success_count", Q(success_count__gte=0)),
            column_check("broadcasts", "failure_count", Q(failure_count__gte=0)),
        ]

    def __str__(self) -> str:
        return f"broadcast {self.id}: {self.status}"
