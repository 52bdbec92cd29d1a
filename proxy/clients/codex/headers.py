"""The one header builder of every ChatGPT backend call (spec §2.2, §2.3).

A fingerprint row is rendered once per version (``render_fingerprint``); ``build_headers`` then
puts together the headers of one call — responses (HTTP SSE and the WebSocket opening), compact,
usage or models — as the original 2.0.0 sends them (its ``transport/client.rs`` and
``transport/headers.rs``):

* responses, compact and models start with the *base* headers (authorization,
  chatgpt-account-id, originator, user-agent, sec-ch-ua, the fingerprint's default headers),
  put in the fingerprint's header order; the order list only ranks these: the headers each call
  adds come after them, in the call's own fixed order (``RESPONSES_ORDER``, ``COMPACT_ORDER``,
  models: cookie, accept, x-codex-installation-id);
* usage sends only user-agent, authorization, originator, chatgpt-account-id, cookie, accept —
  no fingerprint headers, no installation id;
* a header a call sets again keeps the place it already had and takes the new value (the
  models call's ``accept-encoding: gzip, deflate`` replaces the fingerprint's in place);
* a call without ``accept-encoding`` ends with the one the original's HTTP client (reqwest with
  gzip, brotli, zstd and deflate) adds by itself: ``gzip, br, zstd, deflate``.

Every advertised ``accept-encoding`` is cut to the codings this process can decode.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy import identity
from proxy.clients.codex.content_encodings import decodable_accept_encoding

OPENAI_BETA = "responses_websockets=2026-02-06"
RESIDENCY = "us"
# What the original's HTTP client sends when the call names no accept-encoding itself.
HTTP_CLIENT_ACCEPT_ENCODING = "gzip, br, zstd, deflate"
# The models call's own (the original sets it on its auxiliary calls).
MODELS_ACCEPT_ENCODING = "gzip, deflate"


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
    # The base headers' names in sending order (chatgpt-account-id left out when unknown).
    base_order: tuple[str, ...]


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
    defaults: dict[str, str] = {}
    for entry in fingerprint.get("default_headers_json") or []:
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        name = entry["name"].lower()
        value = _default_value(name, entry["value"])
        # The first of a name wins, and none replaces a base header (as the original's).
        if value and name not in defaults and name not in _BASE_NAMES:
            defaults[name] = value
    order = tuple(name.lower() for name in fingerprint.get("header_order_json") or [])
    return FingerprintHeaders(
        originator=fingerprint["originator"],
        user_agent=user_agent,
        sec_ch_ua=f'"Chromium";v="{fingerprint["chromium_version"]}", "Not:A-Brand";v="24"',
        default_headers=tuple(defaults.items()),
        order=order,
        base_order=_ranked((*_BASE_NAMES, *defaults), order),
    )


_BASE_NAMES = ("authorization", "chatgpt-account-id", "originator", "user-agent", "sec-ch-ua")


def _ranked(names: tuple[str, ...], order: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` with those the order lists first, in its sequence, then the rest as they
    came (the original's ``order_headers``)."""
    listed = [name for name in dict.fromkeys(order) if name in names]
    return (*listed, *(name for name in names if name not in listed))


def _default_value(name: str, value: str) -> str:
    # Only what this process can decode is advertised: an encoding the client cannot undo
    # would reach our SSE scanner as bytes it cannot read.
    if name == "accept-encoding":
        return decodable_accept_encoding(value)
    return value


# What responses and compact add after the base headers, in the original's order; the names
# with a per-request value are sent only when the caller gave one.
RESPONSES_ORDER = (
    "content-type",
    "cookie",
    "accept",
    "openai-beta",
    "x-openai-internal-codex-residency",
    "x-client-request-id",
    "x-codex-installation-id",
    "session-id",
    "thread-id",
    "x-codex-turn-id",
    "x-codex-window-id",
    "x-codex-turn-state",
    "x-codex-turn-metadata",
    "x-codex-beta-features",
    "x-responsesapi-include-timing-metrics",
    "version",
    "x-codex-parent-thread-id",
    "x-openai-subagent",
)
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
COMPACT_ORDER = tuple(name for name in RESPONSES_ORDER if name not in COMPACT_OMITTED_HEADERS)
_FIXED_VALUES = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "openai-beta": OPENAI_BETA,
    "x-openai-internal-codex-residency": RESIDENCY,
}


def _base(fingerprint: FingerprintHeaders, credentials: Credentials) -> dict[str, str]:
    values = {
        "authorization": f"Bearer {credentials.access_token}",
        "chatgpt-account-id": credentials.chatgpt_account_id,
        "originator": fingerprint.originator,
        "user-agent": fingerprint.user_agent,
        "sec-ch-ua": fingerprint.sec_ch_ua,
        **dict(fingerprint.default_headers),
    }
    return {name: value for name in fingerprint.base_order if (value := values.get(name))}


def _usage(credentials: Credentials, fingerprint: FingerprintHeaders) -> dict[str, str]:
    values = {
        "user-agent": fingerprint.user_agent,
        "authorization": f"Bearer {credentials.access_token}",
        "originator": fingerprint.originator,
    }
    if credentials.chatgpt_account_id:
        values["chatgpt-account-id"] = credentials.chatgpt_account_id
    return values


def build_headers(
    call: Call,
    *,
    fingerprint: FingerprintHeaders,
    credentials: Credentials,
    request_headers: Mapping[str, str] | None = None,
    cookie: str | None = None,
) -> list[tuple[str, str]]:
    """The headers of one ``call`` in wire order (module docstring).

    ``request_headers`` are the per-request values of a responses or compact call the caller
    derived (client request id, installation id, identity pseudonyms, forwarded context,
    subagent); they fill their slots of the call's order and never replace a base header. The
    installation id is the account's own when the caller gave none. Usage and models take no
    per-request values.
    """
    if call is Call.USAGE:
        values = _usage(credentials, fingerprint)
        if cookie:
            values["cookie"] = cookie
        values["accept"] = "application/json"
    elif call is Call.MODELS:
        values = _base(fingerprint, credentials)
        if cookie:
            values["cookie"] = cookie
        values["accept"] = "application/json"
        values["accept-encoding"] = MODELS_ACCEPT_ENCODING
        values["x-codex-installation-id"] = identity.installation_id(credentials.account_id)
    else:
        values = _base(fingerprint, credentials)
        request_headers = request_headers or {}
        for name in COMPACT_ORDER if call is Call.COMPACT else RESPONSES_ORDER:
            value = _FIXED_VALUES.get(name) or (cookie if name == "cookie" else None)
            value = value or request_headers.get(name)
            if name == "x-codex-installation-id" and not value:
                value = identity.installation_id(credentials.account_id)
            if value:
                values[name] = value
    if "accept-encoding" not in values:
        accept_encoding = decodable_accept_encoding(HTTP_CLIENT_ACCEPT_ENCODING)
        if accept_encoding:
            values["accept-encoding"] = accept_encoding
    return list(values.items())
