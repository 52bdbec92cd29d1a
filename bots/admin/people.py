"""People by name on the bot's screens (issue 38 item 6): a Telegram user as the card names
them — "first last (@username)" — linked to their page, with the numeric id beside it; the
console's operator by the log-in name, not the id of the admin row."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import JSONObject
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from bots.models import BotUser
from bots.pipeline.card import display_name

# The annotation ``with_user_profiles`` adds: {"first", "last", "username"} or None.
PROFILE = "user_profile"


def console_name(request: HttpRequest) -> str:
    """The operator's name as the audit trail records it: the user's ``str()`` (the console's
    log-in name), not ``get_username()`` — the admin row's id, which nobody reads."""
    return str(request.user)


def with_user_profiles(queryset: QuerySet, *, user_field: str) -> QuerySet:
    """``queryset`` with each row's user's names (``PROFILE``) read from ``users`` of the same
    bot: one correlated subquery on its primary key per row."""
    profile = BotUser.objects.filter(bot_id=OuterRef("bot_id"), user_id=OuterRef(user_field))
    return queryset.annotate(
        **{
            PROFILE: Subquery(
                profile.values(
                    json=JSONObject(first="first_name", last="last_name", username="username")
                )[:1]
            )
        }
    )


def users_by_id(*, bot_id: int, user_ids: Iterable[int]) -> dict[int, BotUser]:
    """The ``users`` rows of ``user_ids`` (one query)."""
    wanted = list(dict.fromkeys(user_ids))
    if not wanted:
        return {}
    rows = BotUser.objects.filter(bot_id=bot_id, user_id__in=wanted).only(
        "bot_id", "user_id", "first_name", "last_name", "username"
    )
    return {row.user_id: row for row in rows}


def profile_user(user_id: int, profile: dict | None) -> BotUser | None:
    """An unsaved ``BotUser`` carrying the names of ``profile`` (the annotation), or None."""
    if profile is None:
        return None
    return BotUser(
        user_id=user_id,
        first_name=profile.get("first") or "",
        last_name=profile.get("last") or "",
        username=profile.get("username") or "",
    )


def user_link(user_id: int | None, user: BotUser | None) -> SafeString:
    """The user's name linking to their page, their id beside it; the id alone (marked) for a
    user whose row is gone; a dash for no user."""
    if user_id is None:
        return format_html("{}", "—")
    if user is None:
        return format_html('{} <span class="quiet">(no profile)</span>', user_id)
    name = display_name(user)
    url = reverse("admin:bots_botuserlisting_change", args=[user_id])
    if name == f"ID_{user_id}":  # nothing to call them by
        return format_html('<a href="{}">{}</a>', url, user_id)
    return format_html('<a href="{}">{}</a> <span class="quiet">{}</span>', url, name, user_id)


def operator_names(names: Iterable[str]) -> dict[str, str]:
    """The console operators among ``names`` (as older rows stored them: the admin row's
    ``get_username()``) → their name; one query."""
    model = get_user_model()
    wanted = [name for name in dict.fromkeys(names) if name]
    if not wanted:
        return {}
    field = model.USERNAME_FIELD
    return {
        user.get_username(): str(user) for user in model.objects.filter(**{f"{field}__in": wanted})
    }
