"""The users and topics screens (through the unmanaged mirrors of their composite-key tables)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from bots.admin.actions import UserActions
from bots.admin.common import (
    NOT_CONFIGURED,
    CurrentBotAdmin,
    audit_from_console,
    is_id,
    relayed_messages_link,
    telegram_context,
)
from bots.admin.deletion import TopicPurgeViews, UserDeletionViews
from bots.admin.people import PROFILE, profile_user, user_link, with_user_profiles
from bots.models import AuditAction, AuditOutcome, BotUser, BotUserListing, Topic, TopicListing
from bots.pipeline.card import display_name
from bots.pipeline.moderation import set_note
from bots.selectors import topic_get_for_thread
from bots.services.topics import NOTE_MAX_LENGTH, topic_set_note


@admin.register(BotUserListing)
class BotUserAdmin(UserDeletionViews, UserActions, CurrentBotAdmin):
    list_display = (
        "name",
        "user_id",
        "status",
        "is_verified",
        "is_banned",
        "is_risk",
        "topic",
        "ledger",
        "last_seen_at",
    )
    list_display_links = ("name",)
    list_filter = ("is_banned", "is_risk", "is_verified", "status")
    search_fields = ("user_id", "first_name", "last_name", "username")
    search_help_text = "A user id (exact), or part of a name or @username."
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "user_id",
                    "first_name",
                    "last_name",
                    "username",
                    "status",
                    "is_banned",
                    "is_risk",
                    "is_verified",
                    "verified_at",
                    "first_seen_at",
                    "last_seen_at",
                )
            },
        ),
        (
            "Pending challenge and throttles",
            {
                "classes": ("collapse",),
                "fields": (
                    "verify_answer",
                    "verify_msg_id",
                    "verify_request_hash",
                    "verify_request_expires_at",
                    "verify_request_generation",
                    "verify_submit_not_before",
                    "rate_window_start",
                    "rate_count",
                    "last_notice_at",
                    "risk_notice_at",
                ),
            },
        ),
    )

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # the actions change users; fields are never edited by hand

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        topics = Topic.objects.filter(bot_id=OuterRef("bot_id"), user_id=OuterRef("user_id"))
        return (
            super()
            .get_queryset(request)
            .annotate(
                topic_thread_id=Subquery(topics.values("thread_id")[:1]),
                topic_status=Subquery(topics.values("status")[:1]),
            )
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        conditions = Q()
        for term in search_term.split():
            name = term.removeprefix("@")
            matches = (
                Q(first_name__icontains=name)
                | Q(last_name__icontains=name)
                | Q(username__icontains=name)
            )
            if is_id(term):
                matches |= Q(user_id=int(term))
            conditions &= matches
        return queryset.filter(conditions), False

    @admin.display(description="name", ordering="first_name")
    def name(self, obj: BotUserListing) -> str:
        """As the user's card names them: first and last name (@username)."""
        return display_name(
            BotUser(
                user_id=obj.user_id,
                first_name=obj.first_name,
                last_name=obj.last_name,
                username=obj.username,
            )
        )

    @admin.display(description="topic")
    def topic(self, obj: BotUserListing) -> str:
        thread_id = getattr(obj, "topic_thread_id", None)
        if thread_id is None:
            return "—"
        url = reverse("admin:bots_topiclisting_change", args=[thread_id])
        status = getattr(obj, "topic_status", None)  # annotated with the thread (the queryset)
        return format_html('<a href="{}">{} ({})</a>', url, thread_id, status)

    @admin.display(description="ledger")
    def ledger(self, obj: BotUserListing) -> str:
        return relayed_messages_link("messages", field="user_id", value=obj.user_id)


# ------------------------------------------------------------------ topics


class TopicNoteForm(forms.ModelForm):
    note = forms.CharField(
        required=False,
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Shown on the pinned card; saved as /note does (empty clears it, as /unnote).",
    )

    class Meta:
        model = TopicListing
        fields = ("note",)


@admin.register(TopicListing)
class TopicAdmin(TopicPurgeViews, UserActions, CurrentBotAdmin):
    form = TopicNoteForm
    list_display = (
        "thread_id",
        "user",
        "title",
        "status",
        "note",
        "pinned_msg_id",
        "created_at",
        "closed_at",
        "ledger",
    )
    list_filter = ("status",)
    search_fields = ("thread_id", "user_id", "title", "note")
    search_help_text = "A thread or user id (exact), or part of the title or note."
    fields = (
        "thread_id",
        "user_id",
        "title",
        "status",
        "note",
        "pinned_msg_id",
        "created_at",
        "closed_at",
    )
    readonly_fields = (
        "thread_id",
        "user_id",
        "title",
        "status",
        "pinned_msg_id",
        "created_at",
        "closed_at",
    )
    actions = ["archive_conversations"]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        conditions = Q()
        for term in search_term.split():
            matches = Q(title__icontains=term) | Q(note__icontains=term)
            if is_id(term):
                matches |= Q(thread_id=int(term)) | Q(user_id=int(term))
            conditions &= matches
        return queryset.filter(conditions), False

    def save_model(
        self, request: HttpRequest, obj: TopicListing, form: forms.ModelForm, change: bool
    ) -> None:
        """Save the note as /note or /unnote does (never a raw save of the row)."""
        note = form.cleaned_data["note"] or None
        ctx = telegram_context(obj.bot_id)
        topic = topic_get_for_thread(bot_id=obj.bot_id, thread_id=obj.thread_id)
        audit_from_console(
            request,
            bot_id=obj.bot_id,
            action=AuditAction.NOTE if note else AuditAction.UNNOTE,
            outcome=AuditOutcome.REFUSED if topic is None else AuditOutcome.DONE,
            user_id=obj.user_id,
            detail="the binding is gone" if topic is None else f"{len(note or '')} characters",
        )
        if topic is None:
            self.message_user(request, "The topic's binding is gone.", messages.ERROR)
        elif ctx is None:
            topic_set_note(
                bot_id=topic.bot_id, user_id=topic.user_id, thread_id=topic.thread_id, note=note
            )
            self.message_user(request, f"Card not refreshed: {NOT_CONFIGURED}.", messages.WARNING)
        else:
            set_note(ctx, topic=topic, note=note)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return with_user_profiles(super().get_queryset(request), user_field="user_id")

    @admin.display(description="user", ordering="user_id")
    def user(self, obj: TopicListing) -> str:
        return user_link(obj.user_id, profile_user(obj.user_id, getattr(obj, PROFILE, None)))

    @admin.display(description="ledger")
    def ledger(self, obj: TopicListing) -> str:
        return relayed_messages_link("messages", field="thread_id", value=obj.thread_id)
