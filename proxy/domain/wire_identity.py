"""One account's wire identity for one request (spec §2.5), and the body rewrite that puts it in
place of the client's own ids — the original 2.0.0's ``AccountScopedIdentity``
(``dispatch/affinity/identity.rs``) and its ``response_upstream_request`` /
``compact_upstream_request`` (``transport/client_sse.rs``, ``dispatch/upstream_call.rs``).

``AccountScope`` holds every value an attempt on one account sends in place of the client's:
the account's installation id, the ``cr_`` client request id and the ``wi_`` pseudonym of each
identity value the client sent. Each is computed once (one HMAC) however many places carry it:
the headers, the body's top level, ``client_metadata`` and the ids inside the Codex CLI's
``x-codex-turn-metadata`` JSON.

Where this goes beyond 2.0.0 (which forwarded them verbatim), so that no value of the client's
links two accounts: the ids inside ``x-codex-turn-metadata`` (header, ``client_metadata`` and
body; a JSON string or an object; snake_case or camelCase keys), ``client_metadata
["root_turn_id"]``, the installation id's other spellings (``installation_id``,
``installationId``, as the original's later versions), the body's camelCase ``codexWindowId``
/ ``parentThreadId``, and OpenAI's end-user identifiers ``user`` and ``safety_identifier``.

Every ``wi_`` and ``cr_`` value is scoped by the client key as well as the account
(``proxy.identity``): two keys sending the same value to one account send two values, so they
share no upstream prompt cache or session. The installation id stays the account's.

Left as the client sent them: ``metadata`` (the client's own key-value pairs, which OpenAI
stores with the response and returns) and any text of ``input``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from proxy import identity

INSTALLATION_KEYS = ("x-codex-installation-id", "installation_id", "installationId")
# Identity values inside the Codex CLI's x-codex-turn-metadata JSON, by pseudonym domain. A
# value equal to the one sent elsewhere (the session id, the window id…) gets the same pseudonym
# there, so that the request stays consistent with itself.
TURN_METADATA_IDS = {
    "session_id": "session-id",
    "thread_id": "thread-id",
    "turn_id": "turn-id",
    "root_turn_id": "turn-id",
    "window_id": "window-id",
    "context_window_id": "window-id",
    "parent_thread_id": "parent-thread-id",
    # The same ids as other clients (the desktop app's JavaScript) spell them.
    "sessionId": "session-id",
    "threadId": "thread-id",
    "turnId": "turn-id",
    "rootTurnId": "turn-id",
    "windowId": "window-id",
    "contextWindowId": "window-id",
    "parentThreadId": "parent-thread-id",
}
# A turn metadata string naming none of these is left as it is, without being parsed.
_TURN_METADATA_MARKERS = tuple(f'"{key}"' for key in (*TURN_METADATA_IDS, *INSTALLATION_KEYS))
TURN_METADATA_KEYS = ("turnMetadata", "x-codex-turn-metadata")

# The body's top-level identity fields (replaced only when the client sent them as strings):
# field -> pseudonym domain.
TOP_LEVEL_IDS = {
    "prompt_cache_key": "prompt-cache-key",
    "session_id": "session-id",
    "thread_id": "thread-id",
    "turn_id": "turn-id",
    "x-codex-window-id": "window-id",
    "codexWindowId": "window-id",
    "x-codex-parent-thread-id": "parent-thread-id",
    "parentThreadId": "parent-thread-id",
    # OpenAI's end-user identifiers: a stable id of the client's user would link accounts.
    "user": "user",
    "safety_identifier": "safety-identifier",
}
TOP_LEVEL_KEYS = frozenset(
    {*TOP_LEVEL_IDS, "x-client-request-id", *INSTALLATION_KEYS, *TURN_METADATA_KEYS}
)
# client_metadata's identity keys in the original's order (added keys go last, in this order):
# key -> pseudonym domain; the installation id and the client request id are always set.
METADATA_IDS = (
    ("session_id", "session-id"),
    ("thread_id", "thread-id"),
    ("x-client-request-id", None),
    ("turn_id", "turn-id"),
    ("x-codex-window-id", "window-id"),
    ("x-codex-turn-metadata", None),
    ("x-codex-parent-thread-id", "parent-thread-id"),
)


@dataclass
class AccountScope:
    """What an attempt on ``account_id`` sends in place of the client's identity values.

    ``ids`` maps each pseudonym domain the client sent a value for to that value's pseudonym on
    this account for this client key (stable per account, key and value; different across
    accounts and across keys)."""

    account_id: str
    client_key_id: str | None
    installation_id: str
    client_request_id: str
    ids: dict[str, str]
    _pseudonyms: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    _turn_metadata: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(
        cls,
        values: dict[str, str],
        *,
        client_request_id: str,
        account_id: str,
        client_key_id: str | None,
    ) -> AccountScope:
        """The scope of ``client_key_id``'s ``values`` (domain -> value) on ``account_id``;
        ``client_request_id`` is the client's own id, else the proxy's request id."""
        scope = cls(
            account_id=account_id,
            client_key_id=client_key_id,
            installation_id=identity.installation_id(account_id),
            client_request_id=identity.client_request_id(
                account_id, client_request_id, client_key_id=client_key_id
            ),
            ids={},
        )
        for domain, value in values.items():
            scope.ids[domain] = scope.scoped(domain, value)
        return scope

    def scoped(self, domain: str, value: str) -> str:
        """The ``wi_`` pseudonym of ``value`` in ``domain`` on this account for this key
        (computed once)."""
        key = (domain, value)
        pseudonym = self._pseudonyms.get(key)
        if pseudonym is None:
            pseudonym = self._pseudonyms[key] = identity.scoped_id(
                domain, self.account_id, value, client_key_id=self.client_key_id
            )
        return pseudonym

    def turn_metadata(self, raw: str) -> str:
        """``raw`` (an ``x-codex-turn-metadata`` JSON object) with the identity values in it
        replaced by this account's; anything else — not JSON, not an object, no id in it — as
        it is. Key order and the other values are kept."""
        scoped = self._turn_metadata.get(raw)
        if scoped is None:
            scoped = self._turn_metadata[raw] = self._scope_turn_metadata(raw)
        return scoped

    def turn_metadata_object(self, parsed: dict) -> dict:
        """Turn metadata the client sent as a JSON object rather than as its string: a copy
        with the same ids replaced as in the string form (key order kept)."""
        return self._scope_ids(parsed) or parsed

    def _scope_turn_metadata(self, raw: str) -> str:
        if not any(marker in raw for marker in _TURN_METADATA_MARKERS):
            return raw
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        if not isinstance(parsed, dict):
            return raw
        scoped = self._scope_ids(parsed)
        if scoped is None:
            return raw
        # Written back as compactly as the Codex CLI writes it; an ASCII value (a header's)
        # stays ASCII.
        return json.dumps(scoped, ensure_ascii=raw.isascii(), separators=(",", ":"))

    def _scope_ids(self, parsed: dict) -> dict | None:
        """A copy of turn metadata ``parsed`` with its ids replaced; None when it has none."""
        scoped = dict(parsed)
        changed = False
        for key, value in parsed.items():
            if not isinstance(value, str) or not value:
                continue
            if key in INSTALLATION_KEYS:
                scoped[key] = self.installation_id
                changed = True
            elif key in TURN_METADATA_IDS:
                scoped[key] = self.scoped(TURN_METADATA_IDS[key], value)
                changed = True
        return scoped if changed else None


def _set_or_remove(fields: dict, key: str, value: str | None) -> None:
    if value:
        fields[key] = value
    else:
        fields.pop(key, None)


def scope_top_level(body: dict, scope: AccountScope) -> dict:
    """A copy of ``body`` whose top-level identity fields the client sent as strings carry
    this account's values (a field whose value is blank is dropped, as the original's
    ``replace_existing_identity_field``); turn metadata sent as an object has its ids
    replaced. Key order is kept."""
    scoped = dict(body)
    for key in TOP_LEVEL_KEYS.intersection(body):
        if key in TURN_METADATA_KEYS and isinstance(body[key], dict):
            scoped[key] = scope.turn_metadata_object(body[key])
            continue
        if not isinstance(body[key], str):
            continue
        if key in TOP_LEVEL_IDS:
            _set_or_remove(scoped, key, scope.ids.get(TOP_LEVEL_IDS[key]))
        elif key == "x-client-request-id":
            scoped[key] = scope.client_request_id
        elif key in INSTALLATION_KEYS:
            scoped[key] = scope.installation_id
        elif body[key]:
            scoped[key] = scope.turn_metadata(body[key])
    return scoped


def scope_metadata(metadata: dict, scope: AccountScope, *, turn_metadata: str | None) -> dict:
    """``client_metadata`` (an object) with the account's identity (the original's
    ``response_client_metadata`` and the metadata half of ``compact_upstream_request``): the
    installation id and the client request id always set, each identity id set to the account's
    pseudonym of the client's value or removed when the client has none, ``turn_metadata``
    (the request's turn metadata context, responses only) inserted scoped. The metadata's own
    turn metadata, when it has one, is kept (scoped) rather than replaced by the context's: a
    WebSocket client's context is its upgrade's headers, older than each request's metadata
    (over HTTP the Codex CLI sends the two alike). The client's other keys and their order are
    kept; added keys go last."""
    scoped = dict(metadata)
    scoped["x-codex-installation-id"] = scope.installation_id
    for key in INSTALLATION_KEYS[1:]:
        if key in scoped:
            scoped[key] = scope.installation_id
    for key, domain in METADATA_IDS:
        if key == "x-client-request-id":
            scoped[key] = scope.client_request_id
        elif key == "x-codex-turn-metadata":
            own = scoped.get(key)
            if isinstance(own, str) and own:
                scoped[key] = scope.turn_metadata(own)
            elif isinstance(own, dict):
                scoped[key] = scope.turn_metadata_object(own)
            elif turn_metadata:
                scoped[key] = scope.turn_metadata(turn_metadata)
        else:
            assert domain is not None  # METADATA_IDS: only the keys handled above have none
            _set_or_remove(scoped, key, scope.ids.get(domain))
    root_turn_id = scoped.get("root_turn_id")
    if isinstance(root_turn_id, str) and root_turn_id:
        scoped["root_turn_id"] = scope.scoped("turn-id", root_turn_id)
    return scoped
