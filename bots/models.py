"""Tables of the support bot's storage document (seed 000_0be9a72284d8fa86, "数据表").

PostgreSQL renderings of the seed's D1 conventions: Telegram ids are ``bigint``, the seed's ISO-8601
text timestamps are ``timestamptz`` and its 0/1 flags are ``boolean`` (same meanings).

Naming and shape (matching the proxy's models):

* CHECK constraints are named like PostgreSQL's own ``<table>_<column>_check``; unique
  constraints ``<table>_<columns>_key``; the two ledger indexes and the two partial unique
  indexes of ``broadcasts`` carry the names the seed's schema gives them.
* The seed's "联合唯一" pairs of ``users``, ``topics`` and ``processed_updates`` are their composite
  primary keys (no surrogate ``id`` column the seed does not have), like ``delete_confirmations``'
  explicit composite key.
* No foreign keys: the relations between the tables are logical only (a hand-deleted topic leaves
  ledger rows with a dangling ``thread_id`` on purpose), and Django creates no index the seed
  does not list.
* Column defaults live in the database (``db_default``); services still pass ``now`` explicitly.
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


def _check(table: str, column: str, condition: Q) -> models.CheckConstraint:
    return models.CheckConstraint(condition=condition, name=f"{table}_{column}_check")


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
        constraints = [_check("users", "status", Q(status__in=UserStatus.values))]

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
            _check("topics", "status", Q(status__in=TopicStatus.values)),
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
        constraints = [_check("messages", "direction", Q(direction__in=Direction.values))]
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
        constraints = [_check("processed_updates", "status", Q(status__in=UpdateStatus.values))]

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
            _check("delete_confirmations", "status", Q(status__in=ConfirmationStatus.values))
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
            _check("broadcasts", "status", Q(status__in=BroadcastStatus.values)),
            _check("broadcasts", "expected_count", Q(expected_count__gte=0)),
            _check("broadcasts", "success_count", Q(success_count__gte=0)),
            _check("broadcasts", "failure_count", Q(failure_count__gte=0)),
        ]

    def __str__(self) -> str:
        return f"broadcast {self.id}: {self.status}"


# ------------------------------------------------------------------ listings for the Django admin
#
# Django 5.2's admin refuses models with a composite primary key (``users``, ``topics``,
# ``processed_updates``), so the operators' console reads those tables through these unmanaged
# mirrors. Each declares as its primary key a column that is unique within one bot (the seed's
# unique pairs all start with bot_id), and ``bots.admin`` only ever queries the rows of the
# deployment's bot — so the key is unique where it is used, and every admin statement names the
# bot. Nothing is ever saved or deleted through a mirror: changes go through the services.


class BotUserListing(models.Model):
    """``users`` as the admin lists it (key: ``user_id`` within the bot)."""

    bot_id = models.BigIntegerField()
    user_id = models.BigIntegerField(primary_key=True)
    first_name = models.TextField()
    last_name = models.TextField()
    username = models.TextField()
    status = models.TextField(choices=[("active", "active"), ("deleted", "archived")])
    is_banned = models.BooleanField("banned")
    is_risk = models.BooleanField("high-risk")
    is_verified = models.BooleanField("verified")
    verified_at = models.DateTimeField(null=True)
    verify_answer = models.IntegerField(null=True)
    verify_msg_id = models.BigIntegerField(null=True)
    verify_request_hash = models.TextField(null=True)
    verify_request_expires_at = models.DateTimeField(null=True)
    verify_request_generation = models.BigIntegerField(null=True)
    verify_submit_not_before = models.DateTimeField(null=True)
    rate_window_start = models.DateTimeField(null=True)
    rate_count = models.IntegerField()
    last_notice_at = models.DateTimeField(null=True)
    risk_notice_at = models.DateTimeField(null=True)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "users"
        verbose_name = "user"
        ordering = ["-last_seen_at", "user_id"]

    def __str__(self) -> str:
        return f"{self.first_name or self.username or self.user_id} ({self.user_id})"


class TopicListing(models.Model):
    """``topics`` as the admin lists it (key: ``thread_id`` within the bot)."""

    bot_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    thread_id = models.BigIntegerField(primary_key=True)
    title = models.TextField()
    status = models.TextField(choices=TopicStatus.choices)
    pinned_msg_id = models.BigIntegerField("pinned card message id", null=True)
    note = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = "topics"
        verbose_name = "topic"
        ordering = ["-created_at", "thread_id"]

    def __str__(self) -> str:
        return f"{self.title} (thread {self.thread_id})"


class ProcessedUpdateListing(models.Model):
    """``processed_updates`` as the admin lists it (key: ``update_id`` within the bot)."""

    bot_id = models.BigIntegerField()
    update_id = models.BigIntegerField(primary_key=True)
    status = models.TextField(choices=UpdateStatus.choices)
    attempts = models.IntegerField()
    created_at = models.DateTimeField("claimed at")

    class Meta:
        managed = False
        db_table = "processed_updates"
        verbose_name = "processed update"
        ordering = ["-created_at", "-update_id"]

    def __str__(self) -> str:
        return f"update {self.update_id}: {self.status}"


# ------------------------------------------------------------------ beside the seed (issue #24)


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
            _check("admin_audit_log", "surface", Q(surface__in=AuditSurface.values)),
            _check("admin_audit_log", "action", Q(action__in=AuditAction.values)),
            _check("admin_audit_log", "outcome", Q(outcome__in=AuditOutcome.values)),
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


class AlbumItem(models.Model):
    """``album_items``: the members of an album (``media_group_id``) waiting a moment to be
    relayed together with ``sendMediaGroup`` (issue #24). A table of its own beside the seed's
    eight: a waiting item survives a Redis flush and a worker crash. Rows live seconds; the
    flush deletes them with the ledger rows' insert."""

    id = models.BigAutoField(primary_key=True)
    bot_id = models.BigIntegerField()
    direction = models.TextField(choices=Direction.choices)
    media_group_id = models.TextField()
    user_id = models.BigIntegerField()
    thread_id = models.BigIntegerField()
    source_msg_id = models.BigIntegerField()  # in: the user's message id; out: the topic's
    kind = models.TextField()
    file_id = models.TextField()
    caption = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "album_items"
        constraints = [
            _check("album_items", "direction", Q(direction__in=Direction.values)),
            models.UniqueConstraint(
                fields=["bot_id", "direction", "user_id", "source_msg_id"],
                name="album_items_source_key",
            ),
        ]
        indexes = [
            models.Index(fields=["bot_id", "media_group_id"], name="idx_album_items_group"),
            models.Index(fields=["created_at"], name="idx_album_items_created"),
        ]

    def __str__(self) -> str:
        return f"album {self.media_group_id} item {self.source_msg_id}"


class InboxUpdate(models.Model):
    """``update_inbox``: a Telegram update accepted by the webhook and not finished yet (issue
    36). A table of its own beside the seed's eight (they stay as the seed says).

    The webhook writes the row in the transaction of the update's ``processed_updates`` claim,
    before it answers 200: from then on the row, not Telegram's redelivery, is what brings the
    update to its end. The webhook finishes it at once when it can (within
    TELEGRAM_SEND_BUDGET_MS); otherwise — no send permit in time, a deletion running, a long
    429, a transient Bot API failure, the user's earlier updates still waiting — a Celery worker
    does, under the same limiter. A row is worked on by one holder at a time (``lease_token``
    until ``lease_expires_at``, renewed while it works); a holder that died leaves a lease that
    expires, and the next worker takes the row over. The row is deleted in the transaction that
    marks the claim processed (or failed, for poison). One conversation's rows (the user's
    updates and the admins' in the user's topic) are worked on strictly in ``update_id`` order.
    """

    pk = models.CompositePrimaryKey("bot_id", "update_id")
    bot_id = models.BigIntegerField()
    update_id = models.BigIntegerField()
    # The user whose conversation the update belongs to (their private chat, or the topic bound
    # to them); NULL: an update of no conversation (General, buttons of the group).
    conversation_user_id = models.BigIntegerField(null=True, blank=True)
    # The album (``media_group_id``) the update's message belongs to: its items are collected
    # while later updates of the conversation wait for the album to be sent.
    media_group_id = models.TextField(null=True, blank=True)
    payload = models.JSONField()  # the update, its text made storable
    # Where Telegram delivered it (the Turnstile button's origin without PUBLIC_BASE_URL).
    origin = models.TextField(null=True, blank=True)
    # Attempts that failed (a retryable error) or whose holder died: MAX_ATTEMPTS makes poison.
    attempts = models.IntegerField(db_default=0)
    # Attempts given back without failing (no send permit in time, a deletion running, a 429):
    # the bot pacing itself, never counted toward MAX_ATTEMPTS.
    waits = models.IntegerField(db_default=0)
    # The pipeline steps an earlier attempt settled ("card", "counted"): not repeated.
    settled = models.JSONField(db_default=[])
    not_before = models.DateTimeField(db_default=Now())  # no attempt before this
    lease_token = models.TextField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(db_default="", blank=True)  # sanitized, for the console
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "update_inbox"
        verbose_name = "update waiting in the inbox"
        verbose_name_plural = "inbox"
        constraints = [
            models.CheckConstraint(
                condition=Q(attempts__gte=0), name="update_inbox_attempts_check"
            ),
            models.CheckConstraint(condition=Q(waits__gte=0), name="update_inbox_waits_check"),
        ]
        indexes = [
            models.Index(
                fields=["bot_id", "conversation_user_id", "update_id"],
                name="idx_update_inbox_conversation",
            ),
        ]

    def __str__(self) -> str:
        return f"update {self.update_id} waiting"
