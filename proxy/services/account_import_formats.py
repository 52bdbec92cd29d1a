"""The three account export formats an import reads (spec §6.3), turned into one entry shape.

* **CPR** (this proxy's and codex-proxy-rs' own export): ``{"sourceFormat": "cpr", "accounts":
  [{id, email, accountId, userId, label, planType, token, refreshToken, accessTokenExpiresAt,
  status, addedAt, updatedAt}]}`` (snake_case spellings and ``at``/``accessToken``/
  ``access_token`` accepted; any other key makes the entry invalid), also inside the admin
  API's envelope ``{code, message, data: {…}}``.
* **Sub2API**: a backup ``{exported_at, proxies, accounts: [{name, platform, type,
  credentials: {access_token, refresh_token, expires_at, chatgpt_account_id, chatgpt_user_id,
  email, plan_type, …}, status, …}]}`` (only ``platform: openai`` + ``type: oauth`` accounts
  are ours), a session ``{tokens: {access_token, refresh_token, id_token, account_id}}``, or
  CRS-style flat entries (``cachedQuota``, ``quotaVerifyRequired``, …).
* **CLIProxyAPI** auth files: ``{type|provider: codex|openai, access_token, refresh_token,
  id_token, account_id, email, expired, disabled}``, one object or a list.

``parse_import`` auto-detects the format unless one is named; what it cannot read at all raises
``ImportUnreadable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE_FORMATS = {
    "cpr": "cpr",
    "native": "cpr",
    "sub2api": "sub2api",
    "cliproxyapi": "cliproxyapi",
    "cli_proxy_api": "cliproxyapi",
    "cli-proxy-api": "cliproxyapi",
    "cpa": "cliproxyapi",
}
CPR_KEYS = frozenset(
    {
        "id",
        "email",
        "accountId",
        "account_id",
        "userId",
        "user_id",
        "label",
        "planType",
        "plan_type",
        "token",
        "at",
        "accessToken",
        "access_token",
        "refreshToken",
        "refresh_token",
        "accessTokenExpiresAt",
        "access_token_expires_at",
        "status",
        "addedAt",
        "added_at",
        "updatedAt",
        "updated_at",
    }
)
_ENVELOPE_KEYS = frozenset({"code", "message", "data", "requestId", "request_id"})
_SUB2API_MARKERS = frozenset(
    {
        "credentials",
        "platform",
        "cachedQuota",
        "cached_quota",
        "quotaVerifyRequired",
        "quota_verify_required",
        "quotaFetchedAt",
        "quota_fetched_at",
        "proxyApiKey",
        "proxy_api_key",
        "usage",
        "tokens",
    }
)
MOST_ENTRIES = 5000


class ImportUnreadable(ValueError):
    """Nothing in the body is an account export this import knows."""


@dataclass
class ImportEntry:
    """One account of an export, before its tokens are checked. ``problem`` (invalid) or
    ``skip`` (not an account of ours) is set when it cannot be imported as it stands."""

    index: int
    access_token: str | None = None
    refresh_token: str | None = None
    id: str | None = None
    email: str | None = None
    account_id: str | None = None
    user_id: str | None = None
    label: str | None = None
    plan_type: str | None = None
    status: str | None = None
    cached_quota: dict | None = None
    quota_verify_required: bool = False
    status_from_sub2api: bool = False
    label_truncate: bool = False
    problem: str | None = None
    skip: str | None = None


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return None


def _first(mapping: dict, *keys: str) -> str | None:
    for key in keys:
        value = _text(mapping.get(key))
        if value is not None:
            return value
    return None


def _cpr_entry(index: int, raw: Any) -> ImportEntry:
    if not isinstance(raw, dict):
        return ImportEntry(index=index, problem="the entry is not a JSON object")
    unknown = sorted(key for key in raw if key not in CPR_KEYS)
    if unknown:
        return ImportEntry(index=index, problem=f"unknown field {unknown[0]!r}")
    return ImportEntry(
        index=index,
        access_token=_first(raw, "token", "accessToken", "access_token", "at"),
        refresh_token=_first(raw, "refreshToken", "refresh_token"),
        id=_first(raw, "id"),
        email=_first(raw, "email"),
        account_id=_first(raw, "accountId", "account_id"),
        user_id=_first(raw, "userId", "user_id"),
        label=_first(raw, "label"),
        plan_type=_first(raw, "planType", "plan_type"),
        status=_first(raw, "status"),
    )


def _sub2api_status(raw: dict) -> str:
    status = (_text(raw.get("status")) or "active").lower()
    if status in ("disabled", "inactive", "paused") or raw.get("schedulable") is False:
        return "disabled"
    return "active"


def _sub2api_entry(index: int, raw: Any) -> ImportEntry:
    if not isinstance(raw, dict):
        return ImportEntry(index=index, problem="the entry is not a JSON object")
    platform = (_text(raw.get("platform")) or "openai").lower()
    kind = (_text(raw.get("type")) or "oauth").lower()
    if platform != "openai" or kind != "oauth":
        return ImportEntry(
            index=index, skip=f"a {platform} {kind} account, not an OpenAI OAuth account"
        )
    credentials = raw.get("credentials")
    credentials = credentials if isinstance(credentials, dict) else {}
    tokens = raw.get("tokens")
    tokens = tokens if isinstance(tokens, dict) else {}
    source = {**raw, **tokens, **credentials}
    cached = raw.get("cachedQuota", raw.get("cached_quota"))
    verify = raw.get("quotaVerifyRequired", raw.get("quota_verify_required"))
    return ImportEntry(
        index=index,
        access_token=_first(source, "access_token", "accessToken", "token"),
        refresh_token=_first(source, "refresh_token", "refreshToken"),
        id=None,
        email=_first(source, "email"),
        account_id=_first(source, "chatgpt_account_id", "account_id", "accountId"),
        user_id=_first(source, "chatgpt_user_id", "user_id", "userId"),
        label=_first(raw, "name", "label"),
        plan_type=_first(source, "plan_type", "planType"),
        status=_sub2api_status(raw),
        cached_quota=cached if isinstance(cached, dict) else None,
        quota_verify_required=verify is True,
        status_from_sub2api=True,
        label_truncate=True,
    )


def _cliproxy_entry(index: int, raw: Any) -> ImportEntry:
    if not isinstance(raw, dict):
        return ImportEntry(index=index, problem="the entry is not a JSON object")
    kind = (_first(raw, "type", "provider") or "").lower()
    if kind not in ("codex", "openai"):
        return ImportEntry(index=index, skip=f"a {kind or 'untyped'} auth file, not a Codex one")
    return ImportEntry(
        index=index,
        access_token=_first(raw, "access_token"),
        refresh_token=_first(raw, "refresh_token"),
        email=_first(raw, "email"),
        account_id=_first(raw, "account_id"),
        status="disabled" if raw.get("disabled") is True else "active",
    )


_PARSERS = {"cpr": _cpr_entry, "sub2api": _sub2api_entry, "cliproxyapi": _cliproxy_entry}


def _looks_cliproxy(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(_first(value, "type", "provider"))
        and ("access_token" in value or "refresh_token" in value)
        and "credentials" not in value
        and "platform" not in value
    )


def _looks_sub2api(value: Any) -> bool:
    return isinstance(value, dict) and any(key in value for key in _SUB2API_MARKERS)


def _detect(container: Any, entries: list) -> str:
    if isinstance(container, dict) and ("exported_at" in container or "proxies" in container):
        return "sub2api"
    if any(_looks_sub2api(entry) for entry in entries):
        return "sub2api"
    objects = [entry for entry in entries if isinstance(entry, dict)]
    if objects and all(_looks_cliproxy(entry) for entry in objects):
        return "cliproxyapi"
    return "cpr"


def parse_import(
    payload: Any, *, source_format: str | None = None
) -> tuple[str, list[ImportEntry]]:
    """(the format, its entries) of an export. Raises ImportUnreadable for anything else, an
    unknown ``source_format`` included."""
    named = None
    if source_format is not None:
        named = SOURCE_FORMATS.get(source_format.strip().lower())
        if named is None:
            raise ImportUnreadable(f"unknown sourceFormat {source_format!r}")
    if (
        isinstance(payload, dict)
        and isinstance(payload.get("data"), dict)
        and "accounts" in payload["data"]
        and set(payload) <= _ENVELOPE_KEYS
    ):
        payload = payload["data"]
    container = payload
    if isinstance(payload, dict) and "accounts" in payload:
        entries = payload["accounts"]
        if not isinstance(entries, list):
            raise ImportUnreadable("accounts must be a list")
        if named is None and isinstance(payload.get("sourceFormat"), str):
            named = SOURCE_FORMATS.get(payload["sourceFormat"].strip().lower())
            if named is None:
                raise ImportUnreadable(f"unknown sourceFormat {payload['sourceFormat']!r}")
    elif isinstance(payload, list):
        entries = payload
    elif isinstance(payload, dict) and (
        _looks_cliproxy(payload) or _looks_sub2api(payload) or payload.keys() & CPR_KEYS
    ):
        entries = [payload]
    else:
        raise ImportUnreadable("no importable accounts")
    if not entries:
        raise ImportUnreadable("no importable accounts")
    if len(entries) > MOST_ENTRIES:
        raise ImportUnreadable(f"at most {MOST_ENTRIES} accounts per import")
    chosen = named or _detect(container, entries)
    parser = _PARSERS[chosen]
    return chosen, [parser(index, raw) for index, raw in enumerate(entries)]
