"""Account import (spec §6.3): every entry of an export becomes one atomic upsert, and the
report says what happened to each — imported (a new account), updated (an account of the pool
got the entry's tokens), skipped (not an account of ours, or no token at all) or invalid (with
the reason).

Per entry: the tokens are resolved as an operator's add resolves them
(``account_tokens_resolve``: a valid JWT is used; an expired or opaque one with a refresh token
is exchanged first). An expired JWT without a refresh token still names its account: it comes in
``expired`` (it cannot serve until it gets new tokens). The target is the entry's own ``id`` when
that account exists (its ChatGPT identity must match), else the account holding the same
ChatGPT identity, else a new account (the entry's ``id`` or ``acct_<uuid hex>``). One statement
decides and writes, so two imports of one identity at once end with one account. An upsert clears
the quota lock; a disabled or banned account keeps its status.

A plan the token does not name is read from the usage endpoint (``usage_probe``); a 403 there
marks the account banned.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db import IntegrityError, transaction

from proxy.identifiers import new_id
from proxy.services.account_import_formats import ImportEntry, ImportUnreadable, parse_import
from proxy.services.account_tokens import (
    MAX_LABEL_LENGTH,
    AccountOnboardingError,
    ResolvedTokens,
    account_tokens_resolve,
)
from proxy.services.account_upsert import AccountWrite, account_upsert
from proxy.services.token_refresh import next_refresh_time, refresh_settings
from proxy.storable_text import first_unstorable_text, unstorable_text
from proxy.token_claims import TokenClaims, token_claims

__all__ = ["ImportUnreadable", "ImportOutcome", "ImportReport", "UsageProbe", "accounts_import"]

IMPORTABLE_STATUSES = {
    "active": "active",
    "disabled": "disabled",
    "expired": "expired",
    "quota_exhausted": "quota_exhausted",
    "banned": "banned",
    # The original's transient state: the refresh it stood for is not running here.
    "refreshing": "expired",
}
_ACCOUNT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
MAX_TEXT_LENGTH = 320


class ImportOutcome(enum.StrEnum):
    IMPORTED = "imported"
    UPDATED = "updated"
    SKIPPED = "skipped"
    INVALID = "invalid"


@dataclass(frozen=True)
class EntryResult:
    index: int
    outcome: ImportOutcome
    account_id: str | None = None
    reason: str | None = None


@dataclass
class ImportReport:
    source_format: str
    results: list[EntryResult] = field(default_factory=list)

    def count(self, outcome: ImportOutcome) -> int:
        return sum(1 for result in self.results if result.outcome is outcome)


@dataclass(frozen=True)
class UsageProbe:
    """What the usage endpoint said of a token: a plan and quota, or the HTTP status it
    refused with (None: no answer)."""

    plan_type: str | None = None
    quota: dict | None = None
    refused_status: int | None = None


class _Invalid(Exception):
    pass


@dataclass(frozen=True)
class _Tokens:
    access_token: str
    refresh_token: str | None
    claims: TokenClaims
    expired: bool  # an expired JWT kept for its identity (no refresh token to renew it)
    refreshed: bool = False  # the entry's refresh token was spent: these tokens must be kept


def _resolve(entry: ImportEntry, *, now: datetime) -> _Tokens:
    try:
        resolved: ResolvedTokens = account_tokens_resolve(
            access_token=entry.access_token,
            refresh_token=entry.refresh_token,
            now=now,
            label=f"import entry {entry.index}" + (f" ({entry.id})" if entry.id else ""),
        )
    except AccountOnboardingError as error:
        access_token = entry.access_token
        claims = token_claims(access_token) if access_token else None
        if (
            access_token
            and claims is not None
            and claims.chatgpt_account_id
            and claims.expires_at is not None
            and claims.expires_at <= now
            and not entry.refresh_token
        ):
            return _Tokens(access_token.removeprefix("Bearer ").strip(), None, claims, True)
        raise _Invalid(str(error)) from None
    return _Tokens(
        resolved.access_token,
        resolved.refresh_token,
        resolved.claims,
        False,
        refreshed=resolved.refreshed,
    )


def _label(entry: ImportEntry) -> str | None:
    label = entry.label
    if label is not None and len(label) > MAX_LABEL_LENGTH:
        if not entry.label_truncate:
            raise _Invalid(f"the label is longer than {MAX_LABEL_LENGTH} characters")
        label = label[:MAX_LABEL_LENGTH]
    return label


def _declared_status(entry: ImportEntry) -> str:
    raw = (entry.status or "active").strip().lower()
    status = IMPORTABLE_STATUSES.get(raw)
    if status is None:
        raise _Invalid(f"unknown status {entry.status!r}")
    return status


def _status(declared: str, tokens: _Tokens) -> str:
    if tokens.expired and declared in ("active", "quota_exhausted"):
        return "expired"
    return declared


def _check_texts(entry: ImportEntry) -> None:
    """The entry's own texts, before anything is spent on it: PostgreSQL refuses NUL and lone
    surrogates (which no UTF-8 can carry) in text and jsonb, and nothing of an account is
    longer than MAX_TEXT_LENGTH."""
    for name in ("email", "account_id", "user_id", "plan_type", "label", "status"):
        value = getattr(entry, name)
        if value is None:
            continue
        problem = unstorable_text(value)
        if problem is not None:
            raise _Invalid(f"the {name} contains {problem}")
        if name != "label" and len(value) > MAX_TEXT_LENGTH:  # a label may be truncated
            raise _Invalid(f"the {name} is longer than {MAX_TEXT_LENGTH} characters")
    for name in ("access_token", "refresh_token"):
        value = getattr(entry, name)
        problem = unstorable_text(value) if value is not None else None
        if problem is not None:
            raise _Invalid(f"the {name.replace('_', ' ')} contains {problem}")
    problem = first_unstorable_text(entry.cached_quota)
    if problem is not None:
        raise _Invalid(f"the cached quota contains {problem}")


def _given_id(entry: ImportEntry) -> str | None:
    if entry.id is None:
        return None
    if not _ACCOUNT_ID.fullmatch(entry.id):
        raise _Invalid("the id must be 1–128 letters, digits or _.:-")
    return entry.id


def _import_one(
    entry: ImportEntry,
    *,
    now: datetime,
    margin_seconds: int,
    usage_probe: Callable[[str, str | None, str], UsageProbe] | None,
) -> EntryResult:
    if entry.problem:
        return EntryResult(entry.index, ImportOutcome.INVALID, reason=entry.problem)
    if entry.skip:
        return EntryResult(entry.index, ImportOutcome.SKIPPED, reason=entry.skip)
    if not entry.access_token and not entry.refresh_token:
        return EntryResult(entry.index, ImportOutcome.SKIPPED, reason="no token")
    try:
        # Everything the entry says of itself is checked before its refresh token is exchanged:
        # rotating refresh tokens are single-use, so a refused entry must not have spent it.
        _check_texts(entry)
        given = _given_id(entry)
        label = _label(entry)
        declared = _declared_status(entry)
        tokens = _resolve(entry, now=now)
        status = _status(declared, tokens)
    except _Invalid as problem:
        return EntryResult(entry.index, ImportOutcome.INVALID, reason=str(problem))
    claims = tokens.claims
    plan = claims.plan_type or entry.plan_type
    quota = entry.cached_quota
    quota_at = now if quota is not None else None
    if plan is None and usage_probe is not None and not tokens.expired:
        probe = usage_probe(given or "import", claims.chatgpt_account_id, tokens.access_token)
        plan = probe.plan_type
        if probe.quota is not None:
            quota, quota_at = probe.quota, now
        if probe.refused_status == 403:
            status = "banned"
    new_account_id = given or new_id("acct")
    expires = claims.expires_at
    write = AccountWrite(
        given_id=given,
        new_id=new_account_id,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        access_token_expires_at=expires,
        next_refresh_at=next_refresh_time(
            account_id=new_account_id, expires_at=expires, margin_seconds=margin_seconds, now=now
        )
        if tokens.refresh_token
        else None,
        chatgpt_account_id=claims.chatgpt_account_id,
        chatgpt_user_id=claims.chatgpt_user_id or entry.user_id,
        email=claims.email or entry.email,
        plan_type=plan,
        label=label,
        status=status,
        # An import clears the quota lock (spec §6.3): the entry's status is the account's.
        clears_quota_lock=True,
        quota=quota,
        quota_fetched_at=quota_at,
        quota_verify_required=entry.quota_verify_required,
    )
    row, reason = _upsert(write, now=now)
    if row is None and tokens.refreshed and given is not None:
        # The entry's refresh token is spent and the tokens it bought are the only usable ones:
        # rather than lose them with the refused write, they go to the account holding their
        # ChatGPT identity (or a new one), as if the entry had named no id.
        new_account_id = new_id("acct")
        write = replace(write, given_id=None, new_id=new_account_id)
        if write.next_refresh_at is not None:
            write = replace(
                write,
                next_refresh_at=next_refresh_time(
                    account_id=new_account_id,
                    expires_at=expires,
                    margin_seconds=margin_seconds,
                    now=now,
                ),
            )
        kept, _ = _upsert(write, now=now)
        if kept is not None:
            account_id, inserted = kept
            outcome = ImportOutcome.IMPORTED if inserted else ImportOutcome.UPDATED
            return EntryResult(
                entry.index,
                outcome,
                account_id=account_id,
                reason=f"{reason}; the exchanged tokens were stored on account {account_id}",
            )
    if row is None:
        return EntryResult(entry.index, ImportOutcome.INVALID, account_id=given, reason=reason)
    account_id, inserted = row
    outcome = ImportOutcome.IMPORTED if inserted else ImportOutcome.UPDATED
    return EntryResult(entry.index, outcome, account_id=account_id)


def _upsert(write: AccountWrite, *, now: datetime) -> tuple[tuple[str, bool] | None, str | None]:
    """One entry's statement: ((account id, inserted), None), or (None, why it was refused)."""
    try:
        with transaction.atomic():
            row = account_upsert(write=write, now=now)
    except IntegrityError as error:
        if "ux_accounts_chatgpt_identity" in str(error):
            return None, "another account of the pool already has this ChatGPT identity"
        return None, "an account with this id was added at the same moment; import it again"
    if row is None:
        given = write.given_id
        return None, (
            f"account {given} belongs to another ChatGPT account (or user) than these tokens"
        )
    return row, None


def accounts_import(
    *,
    payload: object,
    now: datetime,
    source_format: str | None = None,
    usage_probe: Callable[[str, str | None, str], UsageProbe] | None = None,
) -> ImportReport:
    """Import every entry of ``payload``; returns the report. Raises ImportUnreadable when the
    body is no export at all (nothing was written then)."""
    chosen, entries = parse_import(payload, source_format=source_format)
    margin_seconds, _ = refresh_settings()
    report = ImportReport(source_format=chosen)
    for entry in entries:
        report.results.append(
            _import_one(entry, now=now, margin_seconds=margin_seconds, usage_probe=usage_probe)
        )
    return report
