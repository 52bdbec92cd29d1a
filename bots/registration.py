"""``GET /telegram/setwebhook/<ADMIN_SECRET>`` and ``/telegram/deletewebhook/…`` (spec §1.4)."""

from __future__ import annotations

import contextlib
from datetime import datetime

from bots import texts
from bots.auth import secret_matches
from bots.clients.telegram import TelegramClient, TelegramError
from bots.conf import BotConfig, load_config
from bots.pipeline.classify import is_positive_integer
from bots.results import EndpointResult
from bots.services.bots import bot_upsert

WEBHOOK_PATH = "/telegram/webhook"
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


def webhook_url(origin: str) -> str:
    return f"{origin}{WEBHOOK_PATH}"


def _unauthorized() -> EndpointResult:
    # One answer for "ADMIN_SECRET not configured" and "wrong secret": nothing to probe.
    return EndpointResult(401, {"error": texts.invalid_admin_key()})


def _missing(config: BotConfig, *, need_webhook_secret: bool) -> list[str]:
    missing = [] if config.bot_token else ["TELEGRAM_BOT_TOKEN"]
    if need_webhook_secret and not config.webhook_secret:
        missing.append("TELEGRAM_WEBHOOK_SECRET")
    return missing


def _telegram_failure(error: TelegramError) -> EndpointResult:
    body: dict = {"status": "error", "detail": str(error)}
    if not error.permanent:
        body["retryable"] = True
    return EndpointResult(502, body)


def _command_scope(config: BotConfig) -> dict:
    return {"type": "chat", "chat_id": config.support_chat_id}


def webhook_register(*, presented_secret: str, origin: str, now: datetime) -> EndpointResult:
    """Point Telegram at ``<PUBLIC_BASE_URL or origin>/telegram/webhook``, record the bot,
    register the menu.

    The bots row is upserted from getMe (``created_at`` kept). The command menu (scoped to the
    support group) is best effort: ``registered``, ``skipped`` (SUPPORT_CHAT_ID invalid) or
    ``failed:<detail>``.
    """
    config = load_config()
    if not secret_matches(presented_secret, config.admin_secret):
        return _unauthorized()
    missing = _missing(config, need_webhook_secret=True)
    if missing:
        return EndpointResult(500, {"error": texts.config_missing(missing)})
    client = config.telegram_client()
    # PUBLIC_BASE_URL, when set, is where Telegram reaches the bot (the operator may open this
    # page through another name); otherwise the origin this request came in at.
    url = webhook_url(config.public_base_url or origin)
    secret = config.webhook_secret
    assert secret is not None  # _missing names it otherwise
    try:
        client.set_webhook(url=url, secret_token=secret, allowed_updates=ALLOWED_UPDATES)
        me = client.get_me()
    except TelegramError as error:
        return _telegram_failure(error)
    if not isinstance(me, dict) or not is_positive_integer(me.get("id")):
        return EndpointResult(
            502, {"status": "error", "detail": texts.telegram_call_failed("getMe")}
        )
    username = me.get("username")
    display_name = me.get("first_name")
    bot_upsert(
        bot_id=me["id"],
        username=username if isinstance(username, str) else "",
        display_name=display_name if isinstance(display_name, str) else "",
        now=now,
    )
    return EndpointResult(
        200,
        {
            "status": "ok",
            "bot": {"id": me["id"], "username": username, "display_name": display_name},
            "webhook": {"url": url},
            "commands": _register_commands(client, config),
        },
    )


def _register_commands(client: TelegramClient, config: BotConfig) -> str:
    if config.support_chat_id is None:
        return "skipped"
    commands = [
        {"command": command, "description": description}
        for command, description in texts.command_menu()
    ]
    try:
        client.set_my_commands(commands=commands, scope=_command_scope(config))
    except TelegramError as error:
        return f"failed:{error}"
    return "registered"


def webhook_unregister(*, presented_secret: str) -> EndpointResult:
    """Delete the webhook and (best effort) the group's command menu; the bots row is kept."""
    config = load_config()
    if not secret_matches(presented_secret, config.admin_secret):
        return _unauthorized()
    missing = _missing(config, need_webhook_secret=False)
    if missing:
        return EndpointResult(500, {"error": texts.config_missing(missing)})
    client = config.telegram_client()
    try:
        client.delete_webhook()
    except TelegramError as error:
        return _telegram_failure(error)
    if config.support_chat_id is not None:
        # Best effort: the webhook, the part that matters, is gone already.
        with contextlib.suppress(TelegramError):
            client.delete_my_commands(scope=_command_scope(config))
    return EndpointResult(200, {"status": "ok"})
