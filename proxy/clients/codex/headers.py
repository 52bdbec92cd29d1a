"""The one header builder of every ChatGPT backend call (spec §2.2, §2.3).

A fingerprint row is rendered once per version (``render_fingerprint``); ``build_headers`` then
puts together the headers of one call — responses (SSE), compact, usage or models — from the
fingerprint, the account's credentials and the per-request headers the caller computed, in the
fingerprint's header order, the rest after it in a fixed order.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy import identity
from proxy.clients.codex.encodings import decodable_accept_encoding

OPENAI_BETA = "responses_websockets=2026-02-06"
RESIDENCY = "us"


class Call(enum.Enum):
    """Which backend endpoint a set of headers is for."""

    RESPONSES = "responses"
    COMPACT = "compact"
    USAGE = "usage"
    MODELS = "models"


@dataclass(frozen=True)
class FingerprintHeaders:
    """A fingerprint rendered once: the static header values and the order to send them in."""

    originator: str
    user_agent: str
    sec_ch_ua: str
    default_headers: tuple[tuple[str, str], ...]
    order: tuple[str, ...]


@dataclass(frozen=True)
class Credentials:
    """What a backend call needs of an account."""

    account_id: str
    access_token: str
    chatgpt_account_id: str | None

    @classmethod
    def of(cls, account: Any) -> Credentials:
        """The credentials of anything with ``id``, ``access_token``, ``chatgpt_account_id``."""
        return cls(account.id, account.access_token, account.chatgpt_account_id)


def render_fingerprint(fingerprint: dict[str, Any]) -> FingerprintHeaders:
    """The static headers of ``fingerprint`` (a ``fingerprints`` row as a dict); cached."""
    return _render(json.dumps(fingerprint, sort_keys=True, default=str))


@functools.lru_cache(maxsize=8)
def _render(serialized: str) -> FingerprintHeaders:
    fingerprint = json.loads(serialized)
    user_agent = (
        fingerprint["user_agent_template"]
        .replace("{version}", fingerprint["app_version"])
        .replace("{platform}", fingerprint["platform"])
        .replace("{arch}", fingerprint["arch"])
    )
    defaults = tuple(
        (entry["name"].lower(), _default_value(entry["name"], entry["value"]))
        for entry in fingerprint.get("default_headers_json") or []
        if isinstance(entry, dict) and entry.get("name")
    )
    return FingerprintHeaders(
        originator=fingerprint["originator"],
        user_agent=user_agent,
        sec_ch_ua=f'"Chromium";v="{fingerprint["chromium_version"]}", "Not:A-Brand";v="24"',
        default_headers=tuple((name, value) for name, value in defaults if value),
        order=tuple(name.lower() for name in fingerprint.get("header_order_json") or []),
    )


def _default_value(name: str, value: str) -> str:
    # Only what this process can decode is advertised: an encoding the client cannot undo
    # would reach our SSE scanner as bytes it cannot read.
    if name.lower() == "accept-encoding":
        return decodable_accept_encoding(value)
    return value


# Headers a compact call does not send (spec §2.3).
COMPACT_OMITTED_HEADERS = frozenset(
    {
        "accept",
        "x-codex-turn-state",
        "x-codex-turn-metadata",
        "x-codex-beta-features",
        "x-responsesapi-include-timing-metrics",
        "version",
        "x-openai-subagent",
    }
)
# The usage call's headers (spec §2.3): identity only, plus the cookie jar.
USAGE_HEADERS = frozenset(
    {
        "user-agent",
        "authorization",
        "originator",
        "chatgpt-account-id",
        "x-codex-installation-id",
        "accept",
        "cookie",
    }
)


def build_headers(
    call: Call,
    *,
    fingerprint: FingerprintHeaders,
    credentials: Credentials,
    request_headers: Mapping[str, str] | None = None,
    cookie: str | None = None,
) -> list[tuple[str, str]]:
    """The headers of one ``call`` in wire order: the fingerprint's order first, then the rest.

    ``request_headers`` are the per-request values the caller derived (client request id,
    identity pseudonyms, forwarded context, subagent); the fixed ones (credentials, the
    fingerprint's) are never overridden by them, except ``x-client-request-id`` and
    ``x-codex-turn-state``, whose slots they fill.
    """
    request_headers = request_headers or {}
    values: dict[str, str] = {"authorization": f"Bearer {credentials.access_token}"}
    if credentials.chatgpt_account_id:
        values["chatgpt-account-id"] = credentials.chatgpt_account_id
    values["originator"] = fingerprint.originator
    if call in (Call.RESPONSES, Call.COMPACT):
        values["x-openai-internal-codex-residency"] = RESIDENCY
        if "x-client-request-id" in request_headers:
            values["x-client-request-id"] = request_headers["x-client-request-id"]
    values["x-codex-installation-id"] = identity.installation_id(credentials.account_id)
    if call in (Call.RESPONSES, Call.COMPACT):
        if "x-codex-turn-state" in request_headers:
            values["x-codex-turn-state"] = request_headers["x-codex-turn-state"]
        values["openai-beta"] = OPENAI_BETA
    values["user-agent"] = fingerprint.user_agent
    if call is not Call.USAGE:
        values["sec-ch-ua"] = fingerprint.sec_ch_ua
        for name, value in fingerprint.default_headers:
            values.setdefault(name, value)
    if call in (Call.RESPONSES, Call.COMPACT):
        values["content-type"] = "application/json"
        values["accept"] = "text/event-stream"
    else:
        values["accept"] = "application/json"
    if cookie:
        values["cookie"] = cookie
    if call in (Call.RESPONSES, Call.COMPACT):
        for name, value in request_headers.items():
            values.setdefault(name, value)
    if call is Call.COMPACT:
        values = {
            name: value for name, value in values.items() if name not in COMPACT_OMITTED_HEADERS
        }
    elif call is Call.USAGE:
        values = {name: value for name, value in values.items() if name in USAGE_HEADERS}
    ordered = [(name, values.pop(name)) for name in fingerprint.order if name in values]
    ordered += list(values.items())
    return ordered
