"""What the Turnstile Mini App page (``GET /telegram/verify?r=…``) is made of (spec §5.5): its
Content-Security-Policy, the settings and texts its script reads, the hardening headers.

Only the site key and the request id come from outside the code; both are handed to the page as
JSON (``json_script``), never spliced into markup or script. Scripts may come only from the
Telegram WebApp script's origin (telegram.org), Turnstile's origin (challenges.cloudflare.com)
and the inline script carrying this response's nonce; frames only from Turnstile; the page talks
only to its own origin. There is no frame-ancestors restriction: Telegram embeds the page.
"""

from __future__ import annotations

import secrets
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.http import HttpResponse
from django.urls import reverse

from bots import texts
from bots.conf import BotConfig, bot_language
from bots.verification.turnstile import ACTION

# The page's script defines it; the Turnstile script calls it once loaded (explicit rendering).
TURNSTILE_ONLOAD = "hodorTurnstileReady"


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def turnstile_script_src(config: BotConfig) -> str:
    """The Turnstile script URL with explicit rendering and the page's onload callback."""
    parts = urlsplit(config.turnstile_script_url)
    query = [
        (key, value) for key, value in parse_qsl(parts.query) if key not in ("render", "onload")
    ]
    query += [("render", "explicit"), ("onload", TURNSTILE_ONLOAD)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def content_security_policy(config: BotConfig, *, nonce: str) -> str:
    telegram = _origin_of(config.telegram_webapp_script_url)
    turnstile = _origin_of(config.turnstile_script_url)
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'nonce-{nonce}' {telegram} {turnstile}",
            f"frame-src {turnstile}",
            "connect-src 'self'",
            "style-src 'unsafe-inline'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def page_settings(config: BotConfig, *, request_id: str) -> dict:
    """What the page's script reads (as JSON): the widget's parameters, the submit URL, texts."""
    return {
        "siteKey": config.turnstile_site_key or "",
        "requestId": request_id,
        "action": ACTION,
        "submitUrl": reverse("bots:verify_turnstile"),
        "turnstileScriptUrl": turnstile_script_src(config),
        "texts": {
            "outside": texts.verify_page_outside_telegram(),
            "loading": texts.verify_page_loading(),
            "challenge": texts.verify_page_challenge(),
            "submitting": texts.verify_page_submitting(),
            "verified": texts.verify_page_verified(),
            "waiting": texts.verify_page_waiting(),
            "networkError": texts.verify_page_network_error(),
            "widgetFailed": texts.verify_page_widget_failed(),
            "unavailable": texts.verify_error_unavailable(),
        },
    }


def page_context(config: BotConfig, *, request_id: str, nonce: str) -> dict:
    return {
        "nonce": nonce,
        "html_lang": "en" if bot_language() == "en" else "zh-CN",
        "title": texts.verify_page_title(),
        "loading": texts.verify_page_loading(),
        "retry": texts.verify_page_retry(),
        "close": texts.verify_page_close(),
        "telegram_script_url": config.telegram_webapp_script_url,
        "page": page_settings(config, request_id=request_id),
    }


def harden(response: HttpResponse) -> HttpResponse:
    """Headers of the page and of every submit answer: never cached, no referrer, no sniffing."""
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    response["X-Content-Type-Options"] = "nosniff"
    return response
