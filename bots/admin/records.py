"""Read-only screens: the message ledger, processed updates, the bots row."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.safestring import SafeString

from bots.admin.charts import Series, bar_chart
from bots.admin.common import CurrentBotAdmin, ReadOnlyAdmin, is_id
from bots.admin.people import PROFILE, profile_user, user_link, users_by_id, with_user_profiles
from bots.models import Bot, ProcessedUpdateListing, RelayedMessage
from bots.response_times import MAX_DAYS, ResponseTimes, response_times
from bots.selectors import bot_current_id

# The periods the response-time page offers (days).
PERIODS = (7, 30, 90)
# Conversations listed on it (those waiting longest first, then the busiest).
LISTED_CONVERSATIONS = 50
MEDIAN, MEAN = "#417690", "#f5a623"
MESSAGES_IN, MESSAGES_OUT = "#79aec8", "#2f6f3e"


@admin.register(RelayedMessage)
class RelayedMessageAdmin(ReadOnlyAdmin, CurrentBotAdmin):
    list_display = (
        "id",
        "created_at",
        "direction",
        "content_type",
        "user",
        "thread_id",
        "group_msg_id",
        "private_msg_id",
    )
    list_filter = ("direction", "content_type")
    search_fields = ("user_id", "thread_id")
    search_help_text = "A user id or a thread id (exact)."
    ordering = ("-created_at", "-id")
    change_list_template = "bots/admin/ledger_change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return with_user_profiles(super().get_queryset(request), user_field="user_id")

    @admin.display(description="user", ordering="user_id")
    def user(self, obj: RelayedMessage) -> SafeString:
        return user_link(obj.user_id, profile_user(obj.user_id, getattr(obj, PROFILE, None)))

    def get_urls(self) -> list[URLPattern]:
        page = path(
            "response-times/",
            self.admin_site.admin_view(self.response_times_view),
            name="bots_relayedmessage_response_times",
        )
        return [page, *super().get_urls()]

    def response_times_view(self, request: HttpRequest) -> HttpResponse:
        """Time to first admin reply, open conversations, messages in/out, per day and per
        conversation, for the last 7, 30 or 90 days (``?days=``)."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        try:
            days = int(request.GET.get("days", "7"))
        except ValueError:
            days = 7
        days = days if days in PERIODS else 7
        bot_id = bot_current_id()
        figures = (
            response_times(bot_id=bot_id, until=timezone.now(), days=days)
            if bot_id is not None
            else None
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Response times",
            "days": days,
            "periods": PERIODS,
            "max_days": MAX_DAYS,
            "time_zone": str(timezone.get_default_timezone()),
            "figures": figures,
            "rows": _day_rows(figures) if figures else [],
            "conversations": (
                _conversation_rows(figures, bot_id=bot_id) if figures and bot_id is not None else []
            ),
            "reply_chart": _reply_chart(figures) if figures else None,
            "messages_chart": _messages_chart(figures) if figures else None,
        }
        return TemplateResponse(request, "bots/admin/response_times.html", context)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # The users' and topics' "messages" links filter the ledger by user or thread.
        return lookup in ("user_id", "thread_id") or super().lookup_allowed(lookup, value, request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if not is_id(term):
            return queryset.none(), False
        return queryset.filter(Q(user_id=int(term)) | Q(thread_id=int(term))), False


@admin.register(ProcessedUpdateListing)
class ProcessedUpdateAdmin(ReadOnlyAdmin, CurrentBotAdmin):
    list_display = ("update_id", "status", "attempts", "created_at")
    list_filter = ("status",)
    search_fields = ("update_id",)
    search_help_text = "An update id (exact)."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if not is_id(term):
            return queryset.none(), False
        return queryset.filter(update_id=int(term)), False


@admin.register(Bot)
class BotAdmin(ReadOnlyAdmin):
    list_display = ("bot_id", "username", "display_name", "created_at")


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f}"


def _day_rows(figures: ResponseTimes) -> list[dict]:
    return [
        {
            "day": day.isoformat(),
            "messages_in": day_figures.messages_in,
            "messages_out": day_figures.messages_out,
            "conversations": len(day_figures.conversations),
            "waits": day_figures.waits,
            "answered": day_figures.answered,
            "mean": _minutes(day_figures.mean_reply_seconds),
            "median": _minutes(day_figures.median_reply_seconds),
        }
        for day, day_figures in reversed(figures.days.items())
    ]


def _conversation_rows(figures: ResponseTimes, *, bot_id: int) -> list[dict]:
    def order(item: tuple) -> tuple:
        user_id, conversation = item
        waiting = conversation.waiting_since
        return (
            waiting is None,
            waiting or 0,
            -(conversation.messages_in + conversation.messages_out),
        )

    rows = sorted(figures.conversations.items(), key=order)[:LISTED_CONVERSATIONS]
    users = users_by_id(bot_id=bot_id, user_ids=[user_id for user_id, _ in rows])
    return [
        {
            "user_id": user_id,
            "user": user_link(user_id, users.get(user_id)),
            "messages_in": conversation.messages_in,
            "messages_out": conversation.messages_out,
            "waits": conversation.waits,
            "answered": conversation.answered,
            "mean": _minutes(conversation.mean_reply_seconds),
            "median": _minutes(conversation.median_reply_seconds),
            "waiting_since": conversation.waiting_since,
        }
        for user_id, conversation in rows
    ]


def _day_labels(figures: ResponseTimes) -> list[str]:
    return [day.strftime("%m-%d") for day in figures.days]


def _reply_chart(figures: ResponseTimes) -> dict:
    """The median and mean time to first reply of each day, in minutes."""
    days = list(figures.days.values())
    return bar_chart(
        title="Time to first admin reply per day",
        unit="min",
        labels=_day_labels(figures),
        series=[
            Series("median", MEDIAN, [_in_minutes(day.median_reply_seconds) for day in days]),
            Series("mean", MEAN, [_in_minutes(day.mean_reply_seconds) for day in days]),
        ],
    )


def _messages_chart(figures: ResponseTimes) -> dict:
    """Messages in (from users) and out (from admins) of each day."""
    days = list(figures.days.values())
    return bar_chart(
        title="Messages per day",
        unit="messages",
        labels=_day_labels(figures),
        series=[
            Series("in (users)", MESSAGES_IN, [float(day.messages_in) for day in days]),
            Series("out (admins)", MESSAGES_OUT, [float(day.messages_out) for day in days]),
        ],
        shown=lambda value: f"{value:g}",
        counts=True,
    )


def _in_minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60
