"""A user's private message (spec §2): the gates, the topic, the card, then the relay.

Order matters (§2.11): every side effect other than the relay (topic, card, welcome, notices)
happens before the relay, and after it only the ledger row and the best-effort risk reminder, so
a redelivery after a failed step never duplicates the user's relayed message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from bots import texts
from bots.models import BotUser, Direction
from bots.pipeline.albums import album_id, collect_album_item
from bots.pipeline.card import edit_card, post_card, refresh_card
from bots.pipeline.classify import command_name, is_positive_integer
from bots.pipeline.content import Content, extract_content
from bots.pipeline.context import CARD_SETTLED, MESSAGE_COUNTED, UpdateContext
from bots.pipeline.failures import required
from bots.pipeline.relay import relay_inbound
from bots.pipeline.replies_mapping import reply_target_in_topic
from bots.pipeline.topics import resolve_topic
from bots.selectors import VerificationSettings, verification_settings_get
from bots.services.relay_notes import card_mark_stale, card_take_stale
from bots.services.users import (
    EnsuredUser,
    user_claim_notice_slot,
    user_clear_verification,
    user_count_message,
    user_ensure,
)
from bots.verification.flow import issue_challenge

logger = logging.getLogger(__name__)


def is_start(content: Content) -> bool:
    """``/start``, ``/start@bot`` or ``/start <payload>`` (``/startups`` is not)."""
    return content.is_text and content.text is not None and command_name(content.text) == "/start"


def _name(sender: Mapping[str, Any], field: str) -> str:
    value = sender.get(field)
    return value if isinstance(value, str) else ""


def handle_inbound(ctx: UpdateContext, message: Mapping[str, Any]) -> None:
    """Process one private message of a user. Retryable failures propagate."""
    content = extract_content(message)
    if content is None:
        return  # unsupported (video note, location, poll, service message, ...): silent
    sender = message.get("from")
    if not isinstance(sender, Mapping) or not is_positive_integer(sender.get("id")):
        return
    ensured = user_ensure(
        bot_id=ctx.bot_id,
        user_id=sender["id"],
        first_name=_name(sender, "first_name"),
        last_name=_name(sender, "last_name"),
        username=_name(sender, "username"),
        now=ctx.now,
    )
    user = ensured.user
    switches = verification_settings_get()
    starting = is_start(content)

    if user.is_banned:
        _card_waits(ctx, ensured)
        _notify_banned(ctx, user)
        return
    if switches.enabled and _needs_verification(ctx, user):
        _card_waits(ctx, ensured)
        _hold_for_verification(ctx, ensured, switches, starting=starting)
        return
    # A message is counted once: a later attempt of an update given back for want of a send
    # permit (a burst may try it many times a minute) does not count it again.
    if not ctx.settled(MESSAGE_COUNTED):
        if not user_count_message(
            bot_id=ctx.bot_id,
            user_id=user.user_id,
            now=ctx.now,
            limit=ctx.config.max_messages_per_minute,
        ):
            _card_waits(ctx, ensured)
            _overflow(ctx, user, switches)
            return
        ctx.settle(MESSAGE_COUNTED)

    topic = resolve_topic(ctx, user)
    if topic is None:
        return
    if topic.pinned_msg_id is None:
        post_card(ctx, user=user, topic=topic, verification_enabled=switches.enabled)
        ctx.settle(CARD_SETTLED)
    elif (
        ensured.display_changed
        or (ctx.is_redelivery and not ctx.settled(CARD_SETTLED))
        or card_take_stale(bot_id=ctx.bot_id, user_id=user.user_id)
    ):
        # user_ensure stores new names first, so an earlier attempt that failed before this step
        # left the names stored and the card old: a later attempt edits the card whatever it
        # finds — unless that attempt settled the card and only waited for a send permit after
        # it (under a burst every attempt would spend a card edit, and its wait, for nothing).
        # A card marked stale (names changed while no message was relayed) is edited now too.
        if edit_card(ctx, user=user, topic=topic, verification_enabled=switches.enabled):
            ctx.settle(CARD_SETTLED)
        else:
            card_mark_stale(bot_id=ctx.bot_id, user_id=user.user_id)  # the next one tries
    else:
        ctx.settle(CARD_SETTLED)
    if starting:
        # /start is never relayed: it (re)opens the conversation and greets.
        _send_welcome_if_slot(ctx, user)
        return
    private_msg_id = message.get("message_id")
    album = album_id(message, content)
    if album is not None and is_positive_integer(private_msg_id):
        # Collected and relayed as one album by the flush (the webhook does not wait for it).
        collect_album_item(
            ctx,
            direction=Direction.IN,
            media_group_id=album,
            user_id=user.user_id,
            thread_id=topic.thread_id,
            source_msg_id=private_msg_id,
            content=content,
        )
        return
    relay_inbound(
        ctx,
        verification_enabled=switches.enabled,
        user=user,
        topic=topic,
        content=content,
        private_msg_id=private_msg_id if is_positive_integer(private_msg_id) else None,
        reply_to_group_msg_id=reply_target_in_topic(
            bot_id=ctx.bot_id, user_id=user.user_id, message=message
        ),
    )


def _card_waits(ctx: UpdateContext, ensured: EnsuredUser) -> None:
    """The user's names changed but this message is not relayed (banned, unverified, over the
    limit): their card is edited with the next message that is (issue 36)."""
    if ensured.display_changed:
        card_mark_stale(bot_id=ctx.bot_id, user_id=ensured.user.user_id)


def _is_expired(ctx: UpdateContext, user: BotUser) -> bool:
    """VERIFY_TTL_HOURS > 0 and verified at or before now − TTL (the boundary counts)."""
    ttl_hours = ctx.config.verify_ttl_hours
    return (
        ttl_hours > 0
        and user.is_verified
        and user.verified_at is not None
        and user.verified_at <= ctx.now - timedelta(hours=ttl_hours)
    )


def _needs_verification(ctx: UpdateContext, user: BotUser) -> bool:
    return not user.is_verified or _is_expired(ctx, user)


def _notify_banned(ctx: UpdateContext, user: BotUser) -> None:
    if user_claim_notice_slot(bot_id=ctx.bot_id, user_id=user.user_id, now=ctx.now):
        required(
            "ban notice",
            lambda: ctx.client.send_message(chat_id=user.user_id, text=texts.ban_notice()),
        )


def _send_welcome_if_slot(ctx: UpdateContext, user: BotUser) -> None:
    if user_claim_notice_slot(bot_id=ctx.bot_id, user_id=user.user_id, now=ctx.now):
        text = ctx.config.welcome_text or texts.welcome_default()
        # The slot is already taken, so a redelivery after a retryable failure does not resend.
        required("welcome", lambda: ctx.client.send_message(chat_id=user.user_id, text=text))


def _hold_for_verification(
    ctx: UpdateContext, ensured: EnsuredUser, switches: VerificationSettings, *, starting: bool
) -> None:
    """Gate 2: the message is dropped (never replayed later); welcome and challenge as due."""
    user = ensured.user
    if _is_expired(ctx, user) and user_clear_verification(bot_id=ctx.bot_id, user_id=user.user_id):
        refresh_card(ctx, user_id=user.user_id, verification_enabled=switches.enabled)
    if ensured.is_new or starting:
        _send_welcome_if_slot(ctx, user)
    # First contact gets welcome + challenge together; afterwards at most one challenge a minute
    # (the notice slot, which a /start welcome may already have used).
    if ensured.is_new or user_claim_notice_slot(
        bot_id=ctx.bot_id, user_id=user.user_id, now=ctx.now
    ):
        issue_challenge(ctx, user_id=user.user_id, switches=switches)


def _overflow(ctx: UpdateContext, user: BotUser, switches: VerificationSettings) -> None:
    """Gate 3 refused: re-verification (not a ban) with one combined notice + challenge.

    With verification off every message over the limit lands here (no gate 2 stops the next
    ones): only the first clears anything, and the card, showing "not enabled", never changes.
    """
    cleared = user_clear_verification(bot_id=ctx.bot_id, user_id=user.user_id)
    if cleared and switches.enabled:
        refresh_card(ctx, user_id=user.user_id, verification_enabled=switches.enabled)
    if user_claim_notice_slot(bot_id=ctx.bot_id, user_id=user.user_id, now=ctx.now):
        issue_challenge(
            ctx,
            user_id=user.user_id,
            switches=switches,
            rate_limit=ctx.config.max_messages_per_minute,
        )
