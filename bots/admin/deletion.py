"""The operators' console for deleting: a user's data export, "delete user" and "purge messages".

Each runs the same code as its command — ``delete_user_everywhere`` (/deluser's deletion) and
``purge_topic`` (/purgemsg) — behind a Django confirmation page instead of Telegram buttons, and
neither bypasses Telegram: the topic (or the messages) are deleted in Telegram first, and when
the bot is not configured nothing is done at all. Before a delete, the confirmation page offers
the user's data as a JSON export (``bots.exports``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from bots.admin.common import (
    NOT_CONFIGURED,
    audit_from_console,
    console_actor,
    is_id,
    telegram_context,
)
from bots.clients.telegram import TelegramError
from bots.exports import export_json, user_export
from bots.models import AuditAction, AuditOutcome, RelayedMessage
from bots.pipeline.deluser import delete_user_everywhere
from bots.pipeline.purge import purge_topic
from bots.selectors import bot_current_id, topic_get_for_thread, topic_get_for_user, user_get


def _object_id(object_id: str) -> int:
    if not is_id(object_id):
        raise Http404("no such row")
    return int(object_id)


def _bot_id() -> int:
    bot_id = bot_current_id()
    if bot_id is None:
        raise Http404("no bot yet")
    return bot_id


if TYPE_CHECKING:
    # A mixin of ModelAdmins: checked as one (at run time a plain class).
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class UserDeletionViews(_ModelAdminMixin):
    """On a user's page: "Export data (JSON)" and "Delete user…"."""

    change_form_template = "bots/admin/user_change_form.html"

    def get_urls(self) -> list[URLPattern]:
        views = [
            path(
                "<path:object_id>/export/",
                self.admin_site.admin_view(self.export_view),
                name="bots_botuserlisting_export",
            ),
            path(
                "<path:object_id>/delete-user/",
                self.admin_site.admin_view(self.delete_user_view),
                name="bots_botuserlisting_delete_user",
            ),
        ]
        return [*views, *super().get_urls()]

    def export_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The user's data as a JSON download."""
        if not self.has_view_permission(request):
            raise Http404("not allowed")
        user_id = _object_id(object_id)
        export = user_export(bot_id=_bot_id(), user_id=user_id, now=timezone.now())
        if export is None:
            raise Http404("no such user")
        response = HttpResponse(export_json(export), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="hodor-user-{user_id}.json"'
        return response

    def delete_user_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what a delete removes, the export link, the confirm button. POST: delete."""
        if not request.user.has_perm("bots.delete_botuserlisting"):
            raise Http404("not allowed")
        bot_id, user_id = _bot_id(), _object_id(object_id)
        user = user_get(bot_id=bot_id, user_id=user_id)
        if user is None:
            raise Http404("no such user")
        topic = topic_get_for_user(bot_id=bot_id, user_id=user_id)
        page = reverse("admin:bots_botuserlisting_change", args=[user_id])
        if request.method == "POST":
            return self._delete_user(request, bot_id=bot_id, user=user, topic=topic, page=page)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Delete user {user_id}?",
            "user_row": user,
            "topic": topic,
            "ledger_rows": RelayedMessage.objects.filter(bot_id=bot_id, user_id=user_id).count(),
            "export_url": reverse("admin:bots_botuserlisting_export", args=[user_id]),
            "page_url": page,
        }
        return TemplateResponse(request, "bots/admin/user_delete_confirmation.html", context)

    def _delete_user(self, request, *, bot_id, user, topic, page) -> HttpResponse:
        def audit(outcome: AuditOutcome, detail: str = "") -> None:
            audit_from_console(
                request,
                bot_id=bot_id,
                action=AuditAction.DELETE_USER,
                outcome=outcome,
                user_id=user.user_id,
                detail=detail,
            )

        ctx = telegram_context(bot_id)
        if ctx is None:
            audit(AuditOutcome.REFUSED, NOT_CONFIGURED)
            self.message_user(request, f"Nothing deleted: {NOT_CONFIGURED}.", messages.ERROR)
            return HttpResponseRedirect(page)
        thread_id = topic.thread_id if topic is not None else None
        try:
            deleted = delete_user_everywhere(ctx, user_id=user.user_id, thread_id=thread_id)
        except TelegramError as error:  # retryable: nothing deleted yet
            audit(AuditOutcome.FAILED, "Telegram did not answer")
            self.message_user(
                request,
                f"Nothing deleted: Telegram did not answer ({error}). Try again.",
                messages.ERROR,
            )
            return HttpResponseRedirect(page)
        audit(AuditOutcome.DONE if deleted else AuditOutcome.FAILED)
        if not deleted:
            self.message_user(
                request,
                f"Nothing deleted: Telegram refused to delete topic {thread_id}"
                " (check the bot's rights in the group).",
                messages.ERROR,
            )
            return HttpResponseRedirect(page)
        where = f"topic {thread_id} deleted in Telegram" if thread_id else "no topic"
        self.message_user(
            request,
            f"Deleted user {user.user_id} ({where}): profile, binding, note and ledger rows."
            " Their private chat with the bot is untouched.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:bots_botuserlisting_changelist"))


class TopicPurgeViews(_ModelAdminMixin):
    """On a topic's page: "Purge messages…"."""

    change_form_template = "bots/admin/topic_change_form.html"

    def get_urls(self) -> list[URLPattern]:
        purge = path(
            "<path:object_id>/purge/",
            self.admin_site.admin_view(self.purge_view),
            name="bots_topiclisting_purge",
        )
        return [purge, *super().get_urls()]

    def purge_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what a purge deletes, the confirm button. POST: purge (as /purgemsg)."""
        if not request.user.has_perm("bots.change_topiclisting"):
            raise Http404("not allowed")
        bot_id, thread_id = _bot_id(), _object_id(object_id)
        topic = topic_get_for_thread(bot_id=bot_id, thread_id=thread_id)
        if topic is None:
            raise Http404("no such topic")
        page = reverse("admin:bots_topiclisting_change", args=[thread_id])
        if request.method == "POST":
            return self._purge(request, bot_id=bot_id, topic=topic, page=page)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Purge the messages of topic {thread_id}?",
            "topic": topic,
            "ledger_rows": RelayedMessage.objects.filter(
                bot_id=bot_id, thread_id=thread_id
            ).count(),
            "page_url": page,
        }
        return TemplateResponse(request, "bots/admin/topic_purge_confirmation.html", context)

    def _purge(self, request, *, bot_id, topic, page) -> HttpResponse:
        def audit(outcome: AuditOutcome, detail: str = "") -> None:
            audit_from_console(
                request,
                bot_id=bot_id,
                action=AuditAction.PURGE,
                outcome=outcome,
                user_id=topic.user_id,
                detail=detail,
            )

        ctx = telegram_context(bot_id)
        if ctx is None:
            audit(AuditOutcome.REFUSED, NOT_CONFIGURED)
            self.message_user(request, f"Nothing purged: {NOT_CONFIGURED}.", messages.ERROR)
            return HttpResponseRedirect(page)
        try:
            started = purge_topic(ctx, topic=topic, started_by=console_actor(request))
        except TelegramError as error:
            audit(AuditOutcome.FAILED, "Telegram did not answer")
            self.message_user(
                request,
                f"Purge stopped: Telegram did not answer ({error}). Run it again: messages"
                " already deleted are counted as already gone.",
                messages.ERROR,
            )
            return HttpResponseRedirect(page)
        if started.busy:
            audit(AuditOutcome.REFUSED, "another purge or wipe runs")
        elif started.continues is not None:
            audit(AuditOutcome.STARTED, "continues in the worker")  # the worker adds the end
        else:
            audit(started.outcome or AuditOutcome.DONE, started.counts)
        if started.busy:
            self.message_user(
                request,
                "Not started: another purge or wipe of this bot is running. Try again once it"
                " has reported.",
                messages.WARNING,
            )
        elif started.continues is not None:
            self.message_user(
                request,
                "The purge continues in the background (Celery); its report will be posted in"
                f" the topic. {started.continues}",
                messages.INFO,
            )
        else:
            self.message_user(
                request, f"Purged (report posted in the topic): {started.report}", messages.SUCCESS
            )
        return HttpResponseRedirect(page)
