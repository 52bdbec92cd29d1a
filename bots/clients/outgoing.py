"""The bot's one outgoing HTTP session builder (Telegram's Bot API, Cloudflare's Siteverify).

``trust_env`` stays on, as the bot has always run: a host that reaches api.telegram.org only
through an egress proxy sets ``HTTPS_PROXY``, and the bot uses it. (The proxy app turns it off:
``proxy.clients.outgoing``.)
"""

from __future__ import annotations

from common.outgoing_http import OutgoingSession, Timeout

TRUST_ENV = True


def outgoing_session(
    *, timeout: Timeout, pool_connections: int, pool_maxsize: int
) -> OutgoingSession:
    """A pooled session for one outside service of the bot; ``timeout`` applies to the calls
    that give none of their own."""
    return OutgoingSession(
        timeout=timeout,
        trust_env=TRUST_ENV,
        pool_connections=pool_connections,
        pool_maxsize=pool_maxsize,
    )
