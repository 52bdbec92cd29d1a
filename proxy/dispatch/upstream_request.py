"""The upstream request of one attempt (spec §2.2, §2.3, §2.5): headers in wire order and the
body with the client's identity fields replaced by the account's pseudonyms.

Headers come from the fingerprint row ``current`` (User-Agent template, sec-ch-ua, default
headers, and the header order, which is itself part of the fingerprint), then the per-request
business headers. The fingerprint's rendering is computed once per fingerprint version.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy import identity

if TYPE_CHECKING:
    from proxy.dispatch.accounts import AccountView
    from proxy.dispatch.dispatcher import DispatchRequest

OPENAI_BETA = "responses_websockets=2026-02-06"
RESIDENCY = "us"


@dataclass(frozen=True)
class FingerprintHeaders:
    """A fingerprint rendered once: the static header values and the order to send them in."""

    originator: str
    user_agent: str
    sec_ch_ua: str
    default_headers: tuple[tuple[str, str], ...]
    order: tuple[str, ...]


def render_fingerprint(fingerprint: dict[str, Any]) -> FingerprintHeaders:
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
        (entry["name"], entry["value"])
        for entry in fingerprint.get("default_headers_json") or []
        if isinstance(entry, dict) and entry.get("name")
    )
    return FingerprintHeaders(
        originator=fingerprint["originator"],
        user_agent=user_agent,
        sec_ch_ua=f'"Chromium";v="{fingerprint["chromium_version"]}", "Not:A-Brand";v="24"',
        default_headers=defaults,
        order=tuple(name.lower() for name in fingerprint.get("header_order_json") or []),
    )


# --------------------------------------------------------------------------- identity inputs

# (body key, client_metadata key, header name, pseudonym domain, upstream header)
_IDENTITY_FIELDS = (
    ("session_id", "session_id", "session-id", "session-id", "session-id"),
    ("thread_id", "thread_id", "thread-id", "thread-id", "thread-id"),
    ("turn_id", "turn_id", "x-codex-turn-id", "turn-id", "x-codex-turn-id"),
    ("codexWindowId", "x-codex-window-id", "x-codex-window-id", "window-id", "x-codex-window-id"),
    (
        "parentThreadId",
        "x-codex-parent-thread-id",
        "x-codex-parent-thread-id",
        "parent-thread-id",
        "x-codex-parent-thread-id",
    ),
)
# Context forwarded as upstream headers unchanged: (body key, header name).
_CONTEXT_FIELDS = (
    ("turnState", "x-codex-turn-state"),
    ("turnMetadata", "x-codex-turn-metadata"),
    ("betaFeatures", "x-codex-beta-features"),
    ("version", "version"),
    ("includeTimingMetrics", "x-responsesapi-include-timing-metrics"),
)


# A header value the client's body may set: no control character (CR and LF above all: a
# header injected upstream), at most 8 KiB.
_HEADER_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]{0,8192}")


class InvalidHeaderValue(ValueError):
    """A body field bound for an upstream header holds a control character or is too long."""

    def __init__(self, header: str):
        super().__init__(header)
        self.header = header


def _header_safe(header: str, value: str) -> str:
    if not _HEADER_VALUE.fullmatch(value):
        raise InvalidHeaderValue(header)
    return value


@dataclass
class ClientIdentity:
    """Identity and context values the client sent (body, client_metadata or headers)."""

    values: dict[str, str] = field(default_factory=dict)  # pseudonym domain -> client value
    client_request_id: str | None = None
    context: dict[str, str] = field(default_factory=dict)  # upstream header -> value


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def read_client_identity(body: dict, headers: dict[str, str]) -> ClientIdentity:
    """Collect identity inputs: body top level, then ``client_metadata``, then headers.

    Raises InvalidHeaderValue when a value that is copied into an upstream header cannot be one.
    """
    metadata = body.get("client_metadata") if isinstance(body.get("client_metadata"), dict) else {}
    identity_inputs = ClientIdentity()
    for body_key, metadata_key, header, domain, _ in _IDENTITY_FIELDS:
        value = (
            _text(body.get(body_key)) or _text(metadata.get(metadata_key)) or headers.get(header)
        )
        if value:
            identity_inputs.values[domain] = value
    prompt_cache_key = _text(body.get("prompt_cache_key"))
    if prompt_cache_key:
        identity_inputs.values["prompt-cache-key"] = prompt_cache_key
    identity_inputs.client_request_id = _text(metadata.get("x-client-request-id")) or headers.get(
        "x-client-request-id"
    )
    for body_key, header in _CONTEXT_FIELDS:
        value = _text(body.get(body_key)) or headers.get(header)
        if value:
            # Sent upstream as they are (identity values above are hashed into pseudonyms).
            identity_inputs.context[header] = _header_safe(header, value)
    return identity_inputs


def scoped_body(body: dict, client: ClientIdentity, account_id: str) -> dict:
    """The body with identity fields the client sent as top-level strings (and matching
    ``client_metadata`` entries) replaced by this account's pseudonyms. Key order is kept."""
    if not client.values:
        return body
    scoped = dict(body)
    if "prompt-cache-key" in client.values and isinstance(body.get("prompt_cache_key"), str):
        scoped["prompt_cache_key"] = identity.scoped_id(
            "prompt-cache-key", account_id, client.values["prompt-cache-key"]
        )
    for body_key, _, _, domain, _ in _IDENTITY_FIELDS:
        if isinstance(body.get(body_key), str) and domain in client.values:
            scoped[body_key] = identity.scoped_id(domain, account_id, client.values[domain])
    metadata = body.get("client_metadata")
    if isinstance(metadata, dict):
        new_metadata = dict(metadata)
        for _, metadata_key, _, domain, _ in _IDENTITY_FIELDS:
            if metadata_key in new_metadata and domain in client.values:
                new_metadata[metadata_key] = identity.scoped_id(
                    domain, account_id, client.values[domain]
                )
        if "x-client-request-id" in new_metadata:
            new_metadata.pop("x-client-request-id")
        scoped["client_metadata"] = new_metadata
    return scoped


def upstream_headers(
    *,
    account: AccountView,
    request: DispatchRequest,
    fingerprint: FingerprintHeaders,
    cookie: str | None = None,
) -> list[tuple[str, str]]:
    """The request headers in wire order: the fingerprint's order first, then the rest."""
    client = request.client_identity
    values: dict[str, str] = {"authorization": f"Bearer {account.access_token}"}
    if account.chatgpt_account_id:
        values["chatgpt-account-id"] = account.chatgpt_account_id
    values["originator"] = fingerprint.originator
    values["x-openai-internal-codex-residency"] = RESIDENCY
    values["x-client-request-id"] = identity.client_request_id(
        account.id, client.client_request_id or request.request_id
    )
    values["x-codex-installation-id"] = identity.installation_id(account.id)
    if "x-codex-turn-state" in client.context:
        values["x-codex-turn-state"] = client.context["x-codex-turn-state"]
    values["openai-beta"] = OPENAI_BETA
    values["user-agent"] = fingerprint.user_agent
    values["sec-ch-ua"] = fingerprint.sec_ch_ua
    for name, value in fingerprint.default_headers:
        values.setdefault(name.lower(), value)
    values["content-type"] = "application/json"
    values["accept"] = "text/event-stream"
    if cookie:
        values["cookie"] = cookie
    for _, _, _, domain, header in _IDENTITY_FIELDS:
        if domain in client.values:
            values[header] = identity.scoped_id(domain, account.id, client.values[domain])
    for header, value in client.context.items():
        values.setdefault(header, value)
    if request.subagent:
        values["x-openai-subagent"] = request.subagent

    ordered = [(name, values.pop(name)) for name in fingerprint.order if name in values]
    ordered += list(values.items())
    return ordered


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


def compact_body(body: dict, client: ClientIdentity, account_id: str, request_id: str) -> dict:
    """The body of ``/codex/responses/compact`` for one account (spec §1.5): identity fields
    scoped, and ``client_metadata`` (created when absent) carrying the account's ids."""
    scoped = scoped_body(body, client, account_id)
    metadata = scoped.get("client_metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    metadata["x-codex-installation-id"] = identity.installation_id(account_id)
    for _, metadata_key, _, domain, _ in _IDENTITY_FIELDS:
        if domain in client.values:
            metadata[metadata_key] = identity.scoped_id(domain, account_id, client.values[domain])
    metadata["x-client-request-id"] = identity.client_request_id(
        account_id, client.client_request_id or request_id
    )
    scoped["client_metadata"] = metadata
    return scoped
