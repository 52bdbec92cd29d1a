"""What one attempt sends upstream besides the fixed headers (spec §1.4, §1.5, §2.3, §2.5): the
body with the client's identity replaced by the account's, and the per-request headers (client
request id, installation id, identity pseudonyms, forwarded context, subagent).

The rewrite itself is ``wire_identity``'s; the fixed headers and every call's wire order are the
Codex client's (``proxy.clients.codex``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.domain.wire_identity import (
    TOP_LEVEL_KEYS,
    AccountScope,
    scope_metadata,
    scope_top_level,
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
# Body-only identity values (no header, no client_metadata key): field -> pseudonym domain.
_BODY_ONLY_IDS = (
    ("prompt_cache_key", "prompt-cache-key"),
    ("user", "user"),
    ("safety_identifier", "safety-identifier"),
)
# Context forwarded as upstream headers (body key, header name); the turn metadata has the ids
# in it replaced by the account's.
_CONTEXT_FIELDS = (
    ("turnState", "x-codex-turn-state"),
    ("turnMetadata", "x-codex-turn-metadata"),
    ("betaFeatures", "x-codex-beta-features"),
    ("version", "version"),
    ("includeTimingMetrics", "x-responsesapi-include-timing-metrics"),
)
# client_metadata["x-openai-subagent"] values that become the upstream header (spec §1.4).
SUBAGENTS = frozenset({"review", "compact", "memory_consolidation", "collab_spawn"})
SUBAGENT_HEADER = "x-openai-subagent"


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
    # The client key that sent them: every pseudonym is scoped by it as well as the account.
    client_key_id: str | None = None
    # (account id, request id) -> that account's scope: every pseudonym computed once for the
    # headers and the body of an attempt.
    scopes: dict[tuple[str, str], AccountScope] = field(
        default_factory=dict, repr=False, compare=False
    )


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def _subagent(metadata: dict) -> str | None:
    value = metadata.get(SUBAGENT_HEADER)
    if isinstance(value, str) and value.strip() in SUBAGENTS:
        return value.strip()
    return None


def read_client_identity(
    body: dict, headers: dict[str, str], *, client_key_id: str | None
) -> ClientIdentity:
    """Collect ``client_key_id``'s identity inputs: body top level, then ``client_metadata``,
    then headers; and the context headers (body camelCase field, else the client's header),
    with the subagent that ``client_metadata`` names.

    Raises InvalidHeaderValue when a value that is copied into an upstream header cannot be one.
    """
    metadata = body["client_metadata"] if isinstance(body.get("client_metadata"), dict) else {}
    identity_inputs = ClientIdentity(client_key_id=client_key_id)
    for body_key, metadata_key, header, domain, _ in _IDENTITY_FIELDS:
        value = (
            _text(body.get(body_key)) or _text(metadata.get(metadata_key)) or headers.get(header)
        )
        if value:
            identity_inputs.values[domain] = value
    for body_key, domain in _BODY_ONLY_IDS:
        value = _text(body.get(body_key))
        if value:
            identity_inputs.values[domain] = value
    identity_inputs.client_request_id = (
        _text(body.get("x-client-request-id"))
        or _text(metadata.get("x-client-request-id"))
        or headers.get("x-client-request-id")
    )
    for body_key, header in _CONTEXT_FIELDS:
        value = _text(body.get(body_key)) or headers.get(header)
        if value:
            identity_inputs.context[header] = _header_safe(header, value)
    subagent = _subagent(metadata)
    if subagent:
        identity_inputs.context[SUBAGENT_HEADER] = subagent
    return identity_inputs


def account_scope(client: ClientIdentity, account_id: str, request_id: str) -> AccountScope:
    """The scope of ``client`` on ``account_id`` for the request ``request_id``: computed at the
    first attempt on that account, reused by its headers and body and by a retry there."""
    key = (account_id, request_id)
    scope = client.scopes.get(key)
    if scope is None:
        scope = client.scopes[key] = AccountScope.of(
            client.values,
            client_request_id=client.client_request_id or request_id,
            account_id=account_id,
            client_key_id=client.client_key_id,
        )
    return scope


def scoped_body(body: dict, client: ClientIdentity, account_id: str, request_id: str) -> dict:
    """The responses body for one account (spec §2.5, the original's
    ``response_upstream_request``): the identity fields the client sent as top-level strings
    and an object ``client_metadata`` carry the account's values (``wire_identity``); an absent
    or non-object ``client_metadata`` is left as it is. Key order is kept."""
    metadata = body.get("client_metadata")
    if not isinstance(metadata, dict) and TOP_LEVEL_KEYS.isdisjoint(body):
        return body
    scope = account_scope(client, account_id, request_id)
    scoped = scope_top_level(body, scope)
    if isinstance(metadata, dict):
        scoped["client_metadata"] = scope_metadata(
            metadata, scope, turn_metadata=client.context.get("x-codex-turn-metadata")
        )
    return scoped


def compact_body(body: dict, client: ClientIdentity, account_id: str, request_id: str) -> dict:
    """The body of ``/codex/responses/compact`` for one account (spec §1.5, the original's
    ``compact_upstream_request``): identity fields scoped, and ``client_metadata`` (created when
    absent, a non-object left alone) carrying the account's ids."""
    scope = account_scope(client, account_id, request_id)
    scoped = scope_top_level(body, scope)
    metadata = scoped.get("client_metadata", {})
    if isinstance(metadata, dict):
        scoped["client_metadata"] = scope_metadata(metadata, scope, turn_metadata=None)
    return scoped


# (pseudonym domain, upstream header) of the identity headers.
_IDENTITY_HEADERS = tuple((domain, header) for *_, domain, header in _IDENTITY_FIELDS)


def request_headers(
    *, client: ClientIdentity, account_id: str, request_id: str, subagent: str | None
) -> dict[str, str]:
    """The per-request upstream headers of one attempt on ``account_id`` (the Codex client puts
    them in the call's order): the account's client request id and installation id, the
    pseudonyms of the client's identity values, the context (turn metadata scoped) and the
    subagent (``subagent``, else the one ``client_metadata`` names)."""
    scope = account_scope(client, account_id, request_id)
    values = {
        "x-client-request-id": scope.client_request_id,
        "x-codex-installation-id": scope.installation_id,
    }
    for domain, header in _IDENTITY_HEADERS:
        if domain in scope.ids:
            values[header] = scope.ids[domain]
    for header, value in client.context.items():
        if header == "x-codex-turn-metadata":
            value = scope.turn_metadata(value)
        values[header] = value
    if subagent:
        values[SUBAGENT_HEADER] = subagent
    return values
