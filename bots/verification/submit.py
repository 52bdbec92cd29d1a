"""``POST /telegram/api/verify/turnstile``: the only way a Turnstile challenge completes
(spec §5.5).

The steps run in a fixed order, each refusing with a stable code (every error body is
``{"status":"error","code":…,"message":…}``):

1. ``Origin``, when sent, must be the page's origin — 403 ``forbidden``.
2. ``Content-Type: application/json`` — 400 ``invalid_request``; at most 16 KiB — 413
   ``payload_too_large``; ``requestId`` (64 lowercase hex), ``initData`` (1..8192 characters),
   ``turnstileToken`` (1..2048) — 400 ``invalid_request``.
3. Readiness: a bot row, the bot token and the Turnstile secret — 503 ``unavailable``;
   verification on in Turnstile mode — 409 ``conflict``.
4. ``initData`` signed with the bot token, at most 300 s old — 401 ``unauthorized``.
5. The authenticated user's request: a row (404 ``not_found``, never recreated), not banned
   (403 ``forbidden``), not verified (409 ``conflict``), this request (403 when it is another
   user's, else 409), this generation (409), unexpired (410 ``expired``).
6. The 15 s submit window, claimed by one conditional UPDATE — 429 ``too_many_requests`` with
   ``Retry-After`` (1..15), and no upstream call.
7. Siteverify, with hostname, action and cdata checked — 503 ``unavailable`` (the window
   stays); 422 ``token_rejected``.
8. ``initData`` still valid by the clock now — 401 ``unauthorized``.
9. One conditional UPDATE verifies — lost: 410 when expired by now, else 409.

Then, best effort, the challenge message is edited to "verified" and the pinned card refreshed;
200 ``{"status":"verified"}``. Of two concurrent submits of one request exactly one gets 200.
Neither the token, the initData nor the secret is ever logged.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from bots import texts
from bots.clients.turnstile import SiteverifyClient, SiteverifyUnavailableError
from bots.conf import BotConfig, load_config
from bots.models import BotUser
from bots.pipeline.card import refresh_card
from bots.pipeline.context import BotContext
from bots.pipeline.failures import best_effort
from bots.selectors import (
    MODE_TURNSTILE,
    VerificationSettings,
    bot_current_id,
    user_get,
    verification_settings_get,
)
from bots.services.challenges import (
    SUBMIT_INTERVAL,
    turnstile_submit_claim,
    turnstile_user_verify,
)
from bots.verification.flow import NO_KEYBOARD
from bots.verification.init_data import WebAppIdentity, validate_init_data
from bots.verification.turnstile import ACTION, REQUEST_ID, page_origin, request_hash_of

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024
MAX_INIT_DATA_CHARS = 8192
MAX_TOKEN_CHARS = 2048
# Siteverify refusing our own secret is the operator's problem, not a bad token: the user is
# told verification is unavailable rather than asked to solve the widget again and again.
SECRET_ERROR_CODES = frozenset({"missing-input-secret", "invalid-input-secret"})

FORBIDDEN = "forbidden"
INVALID_REQUEST = "invalid_request"
PAYLOAD_TOO_LARGE = "payload_too_large"
UNAVAILABLE = "unavailable"
CONFLICT = "conflict"
UNAUTHORIZED = "unauthorized"
NOT_FOUND = "not_found"
EXPIRED = "expired"
TOO_MANY_REQUESTS = "too_many_requests"
TOKEN_REJECTED = "token_rejected"


@dataclass(frozen=True)
class SubmitResult:
    status: int
    body: dict
    headers: dict[str, str] = field(default_factory=dict)


VERIFIED = SubmitResult(200, {"status": "verified"})


def _refuse(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None
) -> SubmitResult:
    return SubmitResult(
        status, {"status": "error", "code": code, "message": message}, headers or {}
    )


def payload_too_large() -> SubmitResult:
    return _refuse(413, PAYLOAD_TOO_LARGE, texts.verify_error_too_large())


def unavailable() -> SubmitResult:
    return _refuse(503, UNAVAILABLE, texts.verify_error_unavailable())


@dataclass(frozen=True)
class Submission:
    request_id: str
    init_data: str
    token: str


def _bounded_text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and 1 <= len(value) <= limit else None


def parse_submission(body: bytes) -> Submission | None:
    """The three fields of the JSON body, or None when any is missing or malformed."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict):
        return None
    request_id = document.get("requestId")
    init_data = _bounded_text(document.get("initData"), MAX_INIT_DATA_CHARS)
    token = _bounded_text(document.get("turnstileToken"), MAX_TOKEN_CHARS)
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id):
        return None
    if init_data is None or token is None:
        return None
    return Submission(request_id=request_id, init_data=init_data, token=token)


def turnstile_submit(
    *,
    origin_header: str | None,
    content_type: str,
    body: bytes | None,
    request_origin: str,
    clock: Callable[[], datetime],
) -> SubmitResult:
    """Run the submit steps in order; ``body`` None: it was larger than 16 KiB.

    ``request_origin``: the origin this request reached us at (the page's origin without
    PUBLIC_BASE_URL). ``clock`` is read at the start and again after Siteverify.
    """
    config = load_config()
    origin = page_origin(config, request_origin)
    if origin_header is not None and origin_header != origin:
        return _refuse(403, FORBIDDEN, texts.verify_error_origin())
    if content_type != "application/json":
        return _refuse(400, INVALID_REQUEST, texts.verify_error_invalid_request())
    if body is None:
        return payload_too_large()
    submission = parse_submission(body)
    if submission is None:
        return _refuse(400, INVALID_REQUEST, texts.verify_error_invalid_request())

    bot_id = bot_current_id()
    if bot_id is None or not config.bot_token or not config.turnstile_secret_key:
        return unavailable()
    switches = verification_settings_get()
    if not switches.enabled or switches.mode != MODE_TURNSTILE:
        return _refuse(409, CONFLICT, texts.verify_error_mode_changed())

    now = clock()
    identity = validate_init_data(submission.init_data, bot_token=config.bot_token, now=now)
    if identity is None:
        return _refuse(401, UNAUTHORIZED, texts.verify_error_identity())
    request_hash = request_hash_of(submission.request_id)
    user = user_get(bot_id=bot_id, user_id=identity.user_id)
    refusal = _precheck(
        bot_id=bot_id, user=user, request_hash=request_hash, switches=switches, now=now
    )
    if refusal is not None:
        return refusal
    assert user is not None  # _precheck refuses a missing user
    claimed = turnstile_submit_claim(
        bot_id=bot_id,
        user_id=identity.user_id,
        request_hash=request_hash,
        generation=switches.generation,
        now=now,
    )
    if claimed is None:
        return _why_not_claimed(
            bot_id=bot_id, identity=identity, request_hash=request_hash, switches=switches, now=now
        )
    return _verify_token(
        config=config,
        bot_id=bot_id,
        user=user,
        identity=identity,
        submission=submission,
        switches=switches,
        claimed=claimed,
        expected_hostname=urlsplit(origin or "").hostname,
        clock=clock,
    )


def _precheck(
    *,
    bot_id: int,
    user: BotUser | None,
    request_hash: str,
    switches: VerificationSettings,
    now: datetime,
) -> SubmitResult | None:
    """The refusal the user's row calls for, or None when this request may be submitted."""
    if user is None:
        # Never recreate a user here: a deleted user starts again by writing to the bot.
        return _refuse(404, NOT_FOUND, texts.verify_error_no_user())
    if user.is_banned:
        return _refuse(403, FORBIDDEN, texts.verify_error_banned())
    if user.is_verified:
        return _refuse(409, CONFLICT, texts.verify_error_already_verified())
    if user.verify_request_hash != request_hash:
        belongs_to_another = (
            BotUser.objects.filter(bot_id=bot_id, verify_request_hash=request_hash)
            .exclude(user_id=user.user_id)
            .exists()
        )
        if belongs_to_another:
            return _refuse(403, FORBIDDEN, texts.verify_error_other_account())
        return _refuse(409, CONFLICT, texts.verify_error_link_superseded())
    if user.verify_request_generation != switches.generation:
        return _refuse(409, CONFLICT, texts.verify_error_link_superseded())
    if user.verify_request_expires_at is None or user.verify_request_expires_at <= now:
        return _refuse(410, EXPIRED, texts.verify_error_link_expired())
    return None


def _why_not_claimed(
    *,
    bot_id: int,
    identity: WebAppIdentity,
    request_hash: str,
    switches: VerificationSettings,
    now: datetime,
) -> SubmitResult:
    """The claim found no row to update: the request changed meanwhile (its refusal), or its
    submit window is still running (429 with the seconds left, 1..15)."""
    user = user_get(bot_id=bot_id, user_id=identity.user_id)
    refusal = _precheck(
        bot_id=bot_id, user=user, request_hash=request_hash, switches=switches, now=now
    )
    if refusal is not None:
        return refusal
    assert user is not None  # _precheck refuses a missing user
    not_before = user.verify_submit_not_before
    remaining = (not_before - now).total_seconds() if not_before else SUBMIT_INTERVAL.seconds
    seconds = min(max(math.ceil(remaining), 1), SUBMIT_INTERVAL.seconds)
    return _refuse(
        429,
        TOO_MANY_REQUESTS,
        texts.verify_error_too_many_requests(seconds),
        headers={"Retry-After": str(seconds)},
    )


def _verify_token(
    *,
    config: BotConfig,
    bot_id: int,
    user: BotUser,
    identity: WebAppIdentity,
    submission: Submission,
    switches: VerificationSettings,
    claimed: datetime,
    expected_hostname: str | None,
    clock: Callable[[], datetime],
) -> SubmitResult:
    """Steps 7–10: Siteverify, the identity again, the verifying UPDATE, the notice."""
    client = SiteverifyClient(
        verify_url=config.turnstile_verify_url, secret=config.turnstile_secret_key or ""
    )
    try:
        answer = client.verify(token=submission.token)
    except SiteverifyUnavailableError as error:
        logger.warning("turnstile submit of user %s: siteverify: %s", user.user_id, error)
        return unavailable()
    if not answer.success:
        if SECRET_ERROR_CODES.intersection(answer.error_codes):
            logger.error(
                "turnstile submit of user %s: siteverify refused TURNSTILE_SECRET_KEY (%s)",
                user.user_id,
                ", ".join(answer.error_codes),
            )
            return unavailable()
        logger.info(
            "turnstile submit of user %s: token rejected (%s)",
            user.user_id,
            ", ".join(answer.error_codes) or "no error codes",
        )
        return _refuse(422, TOKEN_REJECTED, texts.verify_error_token_rejected())
    if (answer.hostname, answer.action, answer.cdata) != (
        expected_hostname,
        ACTION,
        submission.request_id,
    ):
        logger.warning(
            "turnstile submit of user %s: token of another context (hostname %r, action %r)",
            user.user_id,
            answer.hostname,
            answer.action,
        )
        return _refuse(422, TOKEN_REJECTED, texts.verify_error_token_rejected())

    now = clock()
    again = validate_init_data(submission.init_data, bot_token=config.bot_token or "", now=now)
    if again is None or again.user_id != identity.user_id:
        return _refuse(401, UNAUTHORIZED, texts.verify_error_identity())
    # _precheck passed: the row read before the claim holds this request's fence and expiry.
    assert user.verify_request_hash is not None and user.verify_request_expires_at is not None
    won = turnstile_user_verify(
        bot_id=bot_id,
        user_id=identity.user_id,
        request_hash=user.verify_request_hash,
        snapshot=switches,
        claimed_not_before=claimed,
        now=now,
    )
    if not won:
        if user.verify_request_expires_at <= now:
            return _refuse(410, EXPIRED, texts.verify_error_link_expired())
        return _refuse(409, CONFLICT, texts.verify_error_link_superseded())
    logger.info("user %s verified through turnstile", identity.user_id)
    _notify_verified(config=config, bot_id=bot_id, user=user, switches=switches, now=now)
    return VERIFIED


def _notify_verified(
    *,
    config: BotConfig,
    bot_id: int,
    user: BotUser,
    switches: VerificationSettings,
    now: datetime,
) -> None:
    """Best effort (spec §5.5 step 10): the challenge message says "verified" (its button
    removed) and the topic's card shows ✅. Any failure is only logged."""
    ctx = BotContext(
        bot_id=bot_id,
        config=config,
        client=config.telegram_client(budget_seconds=config.send_budget_seconds),
        now=now,
    )
    message_id = user.verify_msg_id
    if message_id is not None:
        best_effort(
            "turnstile verified edit",
            lambda: ctx.client.edit_message_text(
                chat_id=user.user_id,
                message_id=message_id,
                text=texts.verified_message(),
                reply_markup=NO_KEYBOARD,
            ),
        )
    best_effort(
        "turnstile card refresh",
        lambda: refresh_card(ctx, user_id=user.user_id, verification_enabled=switches.enabled),
    )
