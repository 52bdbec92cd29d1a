"""Unmanaged mirrors of three seed tables, for the Django admin.

Django 5.2's admin refuses models with a composite primary key (``users``, ``topics``,
``processed_updates``), so the operators' console reads those tables through these unmanaged
mirrors. Each declares as its primary key a column that is unique within one bot (the seed's
unique pairs all start with bot_id), and ``bots.admin`` only ever queries the rows of the
deployment's bot — so the key is unique where it is used, and every admin statement names the
bot. Nothing is ever saved or deleted through a mirror: changes go through the services.
"""

from django.db import models

from bots.models.seed import TopicStatus, UpdateStatus


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
