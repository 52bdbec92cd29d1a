"""Issuing challenges (spec §5.3) and answering their buttons (spec §5.4).

Turnstile challenges are completed on the web page (``bots.verification.submit``), not here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bots import texts
from bots.clients.telegram import (
    TelegramError,
    TelegramPermanentError,
    TelegramRetryableError,
    is_message_not_modified,
)
from bots.pipeline.card import refresh_card
from bots.pipeline.context import UpdateContext
from bots.pipeline.failures import best_effort, required
from bots.selectors import MODE_TURNSTILE, VerificationSettings, user_get, verification_settings_get
from bots.services.challenges import (
    challenge_attach,
    challenge_release,
    challenge_reserve,
    challenge_restore,
    user_verify,
)
from bots.verification.challenge import build_challenge, new_request_hash, parse_callback_value
from bots.verification.turnstile import build_turnstile_challenge, button_origin, missing_keys

logger = logging.getLogger(__name__)

# Sent with the "verified" edit so the old answer buttons disappear (omitting reply_markup would
# keep them).
NO_KEYBOARD: dict[str, Any] = {"inline_keyboard": []}


def issue_challenge(
    ctx: UpdateContext,
    *,
    user_id: int,
    switches: VerificationSettings,
    rate_limit: int | None = None,
) -> bool:
    """Send the user a brand-new challenge in the current mode; True when it was sent.

    ``rate_limit`` set: the rate-limit overflow variant (the limit, then the challenge). The
    fence: reserve (abandon when the user is banned, already verified or the switches changed),
    send, then attach the message id — or release the fence when the send failed (retryable ⇒
    raise, permanent such as "bot was blocked by the user" ⇒ log).

    Turnstile is never downgraded to a weaker mode: with verification off nothing is sent (a
    web request could not complete), and without both keys or an https origin for the page the
    user is told verification is unavailable instead (selfcheck names the cause).
    """
    if switches.mode == MODE_TURNSTILE:
        prepared = _prepare_turnstile(ctx, user_id=user_id, switches=switches)
        if prepared is None:
            if switches.enabled:
                _tell_unavailable(ctx, user_id=user_id, rate_limit=rate_limit)
            return False
    else:
        challenge = build_challenge(switches.mode)
        assert challenge is not None  # math or button: turnstile is the branch above
        prepared = _Prepared(
            text=challenge.text,
            reply_markup=challenge.reply_markup,
            answer=challenge.answer,
            request_hash=new_request_hash(),
            expires_at=None,
        )
    request_hash = prepared.request_hash
    if not challenge_reserve(
        bot_id=ctx.bot_id,
        user_id=user_id,
        request_hash=request_hash,
        snapshot=switches,
        expires_at=prepared.expires_at,
    ):
        return False
    text = prepared.text
    if rate_limit is not None:
        text = f"{texts.rate_limited_prefix(rate_limit)}\n\n{text}"
    try:
        sent = ctx.client.send_message(
            chat_id=user_id, text=text, reply_markup=prepared.reply_markup
        )
    except TelegramError as error:
        challenge_release(
            bot_id=ctx.bot_id,
            user_id=user_id,
            request_hash=request_hash,
            generation=switches.generation,
        )
        if not error.permanent:
            raise
        logger.warning("challenge for user %s not delivered: %s", user_id, error)
        return False
    challenge_attach(
        bot_id=ctx.bot_id,
        user_id=user_id,
        request_hash=request_hash,
        generation=switches.generation,
        message_id=sent["message_id"],
        answer=prepared.answer,
    )
    return True


@dataclass(frozen=True)
class _Prepared:
    """A challenge ready to be fenced and sent."""

    text: str
    reply_markup: dict
    answer: int | None  # None for Turnstile (the web page decides, not a button)
    request_hash: str
    expires_at: datetime | None  # Turnstile only


def _prepare_turnstile(
    ctx: UpdateContext, *, user_id: int, switches: VerificationSettings
) -> _Prepared | None:
    """A Turnstile challenge, or None (logged) when none can be completed now."""
    missing = missing_keys(ctx.config)
    origin = button_origin(ctx.config, ctx.request_origin)
    if not switches.enabled or missing or origin is None:
        logger.warning(
            "turnstile challenge for user %s not issued: %s",
            user_id,
            "verification is off"
            if not switches.enabled
            else f"{', '.join(missing)} not set"
            if missing
            else "no https origin for the page (set PUBLIC_BASE_URL)",
        )
        return None
    challenge = build_turnstile_challenge(origin=origin, now=ctx.now)
    return _Prepared(
        text=challenge.text,
        reply_markup=challenge.reply_markup,
        answer=None,
        request_hash=challenge.request_hash,
        expires_at=challenge.expires_at,
    )


def _tell_unavailable(ctx: UpdateContext, *, user_id: int, rate_limit: int | None) -> None:
    """The user's message was dropped and no challenge can be had: say so (the caller's notice
    slot already allows this message)."""
    text = texts.verification_unavailable()
    if rate_limit is not None:
        text = f"{texts.rate_limited_prefix(rate_limit)}\n\n{text}"
    required(
        "verification unavailable", lambda: ctx.client.send_message(chat_id=user_id, text=text)
    )


def _toast(ctx: UpdateContext, callback_id: str, text: str) -> None:
    required(
        "answerCallbackQuery",
        lambda: ctx.client.answer_callback_query(callback_query_id=callback_id, text=text),
    )


def handle_verification_callback(ctx: UpdateContext, callback: Mapping) -> None:
    """A button press under a challenge in a private chat (``v:<value>``).

    Stale, foreign, replayed or voided challenges (including one issued before the latest
    mode/switch change: its generation is behind) get the "expired" toast; a wrong value
    re-issues a challenge on the same message; the right value verifies the user with one
    conditional UPDATE.
    """
    value = parse_callback_value(callback.get("data"))
    if value is None:
        return  # not ours, or malformed: silent
    callback_id = callback["id"]
    user_id = callback["from"]["id"]
    message = callback["message"]
    message_id = message["message_id"]
    user = user_get(bot_id=ctx.bot_id, user_id=user_id)
    switches = verification_settings_get()
    if (
        user is None
        or message["chat"]["id"] != user_id
        or user.verify_request_hash is None
        or user.verify_request_generation != switches.generation
        or user.verify_msg_id != message_id
    ):
        _toast(ctx, callback_id, texts.toast_challenge_expired())
        return
    if value != user.verify_answer:
        _answer_wrong(
            ctx,
            callback_id=callback_id,
            user_id=user_id,
            message_id=message_id,
            switches=switches,
            shown_hash=user.verify_request_hash,
            shown_answer=user.verify_answer,
        )
        return
    verified = user_verify(
        bot_id=ctx.bot_id,
        user_id=user_id,
        message_id=message_id,
        answer=value,
        request_hash=user.verify_request_hash,
        snapshot=switches,
        now=ctx.now,
    )
    if not verified:
        _toast(ctx, callback_id, texts.toast_challenge_expired())
        return
    # The UPDATE above decided: the user is verified. What follows only tells them and the
    # admins, best effort: a redelivery could not redo it (the challenge is gone), so failing
    # the update here would leave a verified user looking at an "expired" toast.
    best_effort(
        "verified toast",
        lambda: ctx.client.answer_callback_query(
            callback_query_id=callback_id, text=texts.toast_verified()
        ),
    )
    best_effort(
        "verified edit",
        lambda: ctx.client.edit_message_text(
            chat_id=user_id,
            message_id=message_id,
            text=texts.verified_message(),
            reply_markup=NO_KEYBOARD,
        ),
    )
    refresh_card(ctx, user_id=user_id, verification_enabled=switches.enabled)


def _answer_wrong(
    ctx: UpdateContext,
    *,
    callback_id: str,
    user_id: int,
    message_id: int,
    switches: VerificationSettings,
    shown_hash: str,
    shown_answer: int | None,
) -> None:
    """Wrong value: a fresh challenge replaces the old one in the same message (no new push).

    ``shown_hash`` / ``shown_answer``: the fence of the challenge the message shows now.
    """
    if switches.mode == MODE_TURNSTILE:
        _toast(ctx, callback_id, texts.toast_challenge_expired())
        return
    _toast(ctx, callback_id, texts.toast_wrong_answer())
    challenge = build_challenge(switches.mode)
    assert challenge is not None  # math or button: turnstile returned above
    request_hash = new_request_hash()
    if not challenge_reserve(
        bot_id=ctx.bot_id, user_id=user_id, request_hash=request_hash, snapshot=switches
    ):
        return
    try:
        ctx.client.edit_message_text(
            chat_id=user_id,
            message_id=message_id,
            text=f"{texts.wrong_answer_prefix()}\n\n{challenge.text}",
            reply_markup=challenge.reply_markup,
        )
    except TelegramRetryableError:
        # Spec §5.4: edit retryable ⇒ raise, so that Telegram's redelivery redoes the re-issue.
        # But the reserve above already voided the challenge the message shows, and the
        # redelivery's pre-check accepts only a click on the live challenge: it would answer
        # "expired" (to a callback already answered) and leave the user a message whose every
        # button is dead. Putting the shown challenge back lets the redelivery run this again.
        challenge_restore(
            bot_id=ctx.bot_id,
            user_id=user_id,
            request_hash=request_hash,
            generation=switches.generation,
            previous_hash=shown_hash,
            previous_answer=shown_answer,
            message_id=message_id,
        )
        raise
    except TelegramPermanentError as error:
        # "not modified": the message already shows exactly this challenge (the same question
        # came up again), so it is still the live one.
        if not is_message_not_modified(error):
            logger.warning("wrong-answer edit for user %s failed: %s", user_id, error)
            return  # the fence is already replaced: the old message is stale now
    challenge_attach(
        bot_id=ctx.bot_id,
        user_id=user_id,
        request_hash=request_hash,
        generation=switches.generation,
        message_id=message_id,
        answer=challenge.answer,
    )
