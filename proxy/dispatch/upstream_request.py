"""What one attempt sends upstream besides the fixed headers (spec §2.2, §2.3, §2.5): the body
with the client's identity fields replaced by the account's pseudonyms, and the per-request
headers (client request id, identity pseudonyms, forwarded context, subagent).

The fixed headers and their wire order are the Codex client's (``proxy.clients.codex``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy import identity

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
    ``client_metadata`` entries) replaced by this account's pseudonyms. Key order is kept.
    The client's own ``client_metadata["x-client-request-id"]`` never goes upstream: the
    header carries its scoped form."""
    metadata = body.get("client_metadata")
    if not client.values and not (isinstance(metadata, dict) and "x-client-request-id" in metadata):
        return body
    scoped = dict(body)
    if "prompt-cache-key" in client.values and isinstance(body.get("prompt_cache_key"), str):
        scoped["prompt_cache_key"] = identity.scoped_id(
            "prompt-cache-key", account_id, client.values["prompt-cache-key"]
        )
    for body_key, _, _, domain, _ in _IDENTITY_FIELDS:
        if isinstance(body.get(body_key), str) and domain in client.values:
            scoped[body_key] = identity.scoped_id(domain, account_id, client.values[domain])
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


def request_headers(
    *, client: ClientIdentity, account_id: str, request_id: str, subagent: str | None
) -> dict[str, str]:
    """The per-request upstream headers of one attempt on ``account_id``, in sending order."""
    values: dict[str, str] = {
        "x-client-request-id": identity.client_request_id(
            account_id, client.client_request_id or request_id
        )
    }
    if "x-codex-turn-state" in client.context:
        values["x-codex-turn-state"] = client.context["x-codex-turn-state"]
    for _, _, _, domain, header in _IDENTITY_FIELDS:
        if domain in client.values:
            values[header] = identity.scoped_id(domain, account_id, client.values[domain])
    for header, value in client.context.items():
        values.setdefault(header, value)
    if subagent:
        values["x-openai-subagent"] = subagent
    return values


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
