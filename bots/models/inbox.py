"""Work waiting to be relayed, kept in PostgreSQL so that it survives a Redis flush and a worker
crash: album items collected for ``sendMediaGroup`` and the update inbox (tables beside the
seed's eight, issues #24 and 36)."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from bots.models.constraints import column_check
from bots.models.seed import Direction


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
            column_check("album_items", "direction", Q(direction__in=Direction.values)),
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
