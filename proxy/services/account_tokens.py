"""Accounts added or re-tokened the way operators do it (spec §6.3): from an access token
and/or a refresh token alone; the JWT claims say who the account is.

``account_tokens_resolve`` turns what the operator pasted into usable tokens and their claims
(a refresh-token-only add, or an expired/opaque access token with a refresh token, is refreshed
at once); ``account_upsert_from_tokens`` adds the account, or, when its ChatGPT identity is
already in the pool, gives the existing account the new tokens (one INSERT … ON CONFLICT on
``ux_accounts_chatgpt_identity``: counters, cookies and history are kept);
``account_rotate_tokens`` replaces one account's tokens from its own page.

Errors carry ``http_status`` (400 for what the operator gave, 502 when the OAuth server failed)
and messages that never contain a token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Case, TextField, Value, When

from proxy.clients import oauth
from proxy.identifiers import new_id
from proxy.models import Account, AccountStatus
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from proxy.services.account_upsert import AccountWrite, account_upsert
from proxy.services.token_refresh import (
    LEASE_TTL_MS,
    next_refresh_time,
    refresh_settings,
    token_refresh_owner,
    token_refresh_store,
)
from proxy.token_claims import AUTH_CLAIM, TokenClaims, token_claims

logger = logging.getLogger(__name__)

MAX_TOKEN_LENGTH = 16 * 1024
MAX_LABEL_LENGTH = 64


class AccountOnboardingError(ValueError):
    """Adding or re-tokening an account failed; ``str(error)`` is safe to show."""

    http_status = 400


class AccountTokensRejected(AccountOnboardingError):
    """The tokens given cannot make a usable account (the message says why)."""


class TokenExchangeFailed(AccountOnboardingError):
    """The OAuth server did not turn the refresh token or code into tokens."""

    http_status = 502


class AccountRefreshBusy(AccountOnboardingError):
    """The refresh token given is the one an account of the pool holds, and a refresh of that
    account holds its lease right now: exchanging it too would spend it twice (peers B.2)."""

    http_status = 409


@dataclass(frozen=True)
class ResolvedTokens:
    access_token: str
    refresh_token: str | None
    claims: TokenClaims
    refreshed: bool  # the OAuth server was asked (the refresh token given was spent)

    def __repr__(self) -> str:  # never print the tokens
        return f"ResolvedTokens(account={self.claims.chatgpt_account_id!r}, <redacted>)"


def _clean(token: str | None, name: str) -> str | None:
    if token is None:
        return None
    token = token.strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    if len(token) > MAX_TOKEN_LENGTH:
        raise AccountTokensRejected(f"The {name} is longer than {MAX_TOKEN_LENGTH} characters.")
    if any(character.isspace() for character in token):
        raise AccountTokensRejected(f"The {name} contains spaces or line breaks.")
    return token or None


def _why_unusable(claims: TokenClaims | None, *, now: datetime) -> str | None:
    if claims is None:
        return "The access token is not a JWT (an opaque token says nothing about its account)"
    if claims.expires_at is None:
        return "The access token has no expiry (exp)"
    if claims.expires_at <= now:
        return f"The access token expired at {claims.expires_at:%Y-%m-%d %H:%M} UTC"
    return None


def resolved_from_token_set(
    tokens: oauth.TokenSet, *, refresh_token: str | None, now: datetime
) -> ResolvedTokens:
    """Usable tokens from an OAuth answer; ``refresh_token`` is kept when none came back."""
    claims = token_claims(tokens.access_token)
    if claims is not None and not claims.email and tokens.id_token:
        id_claims = token_claims(tokens.id_token)
        if id_claims is not None and id_claims.email:
            claims = TokenClaims(
                chatgpt_account_id=claims.chatgpt_account_id,
                chatgpt_user_id=claims.chatgpt_user_id,
                plan_type=claims.plan_type,
                email=id_claims.email,
                expires_at=claims.expires_at,
            )
    problem = _why_unusable(claims, now=now)
    if problem is not None:
        raise TokenExchangeFailed(f"The OAuth server returned an unusable token: {problem}.")
    assert claims is not None  # _why_unusable names a token without claims
    _require_identity(claims)
    return ResolvedTokens(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token or refresh_token,
        claims=claims,
        refreshed=True,
    )


def _require_identity(claims: TokenClaims) -> None:
    if not claims.chatgpt_account_id:
        raise AccountTokensRejected(
            f"The access token carries no ChatGPT account id (claim {AUTH_CLAIM})."
        )


def _exchange(refresh_token: str, *, label: str, now: datetime) -> oauth.TokenSet:
    """Spend ``refresh_token`` at the token endpoint.

    When an account of the pool holds this very refresh token (an import of an export, an
    operator pasting it again), the exchange runs under that account's refresh lease, like any
    refresh of it, and the rotated tokens are stored on it at once, before the caller writes
    anything: a refresh running meanwhile is not raced (AccountRefreshBusy), and a later
    failure of the caller's write cannot lose the only usable refresh token.
    """
    holder = (
        Account.objects.filter(refresh_token=refresh_token).values_list("pk", flat=True).first()
    )
    if holder is None:
        return _call_token_endpoint(refresh_token, label=label)
    owner = token_refresh_owner()
    if not refresh_lease_acquire(account_id=holder, owner=owner, ttl_ms=LEASE_TTL_MS):
        logger.info("token exchange for %s: account %s is being refreshed", label, holder)
        raise AccountRefreshBusy(
            f"Account {holder} holds this refresh token and is being refreshed right now; "
            "try again in a moment."
        )
    try:
        if not Account.objects.filter(pk=holder, refresh_token=refresh_token).exists():
            raise AccountTokensRejected(
                f"Account {holder} has just refreshed this refresh token (it is spent); its "
                "new tokens are already stored."
            )
        tokens = _call_token_endpoint(refresh_token, label=label)
        token_refresh_store(
            account_id=holder, spent_refresh_token=refresh_token, tokens=tokens, now=now
        )
        logger.info("token exchange for %s: stored on account %s", label, holder)
        return tokens
    finally:
        refresh_lease_release(account_id=holder, owner=owner)


def _call_token_endpoint(refresh_token: str, *, label: str) -> oauth.TokenSet:
    try:
        return oauth.refresh_tokens(refresh_token)
    except oauth.OAuthError as error:
        # The log names what was being added, never the token.
        logger.warning("token exchange for %s: %s", label, error)
        if error.permanent:
            raise AccountTokensRejected(
                f"The OAuth server refused the refresh token ({error.code or error.outcome})."
            ) from None
        raise TokenExchangeFailed(f"The refresh token could not be exchanged: {error}") from None


def account_tokens_resolve(
    *,
    access_token: str | None,
    refresh_token: str | None,
    now: datetime,
    label: str = "a new account",
) -> ResolvedTokens:
    """Check what an operator pasted and make it usable.

    A JWT access token with a future ``exp`` and a ChatGPT account id is used as it is. With
    only a refresh token, or an access token that is opaque, expired or without ``exp`` plus a
    refresh token, the refresh token is exchanged first (it is spent: the rotated one is what
    gets stored; see ``_exchange`` for a refresh token an account already holds). ``label``
    names what is being added in log lines (an account id, an import entry), never a token.
    Raises AccountTokensRejected (400), AccountRefreshBusy (409) or TokenExchangeFailed (502).
    """
    access_token = _clean(access_token, "access token")
    refresh_token = _clean(refresh_token, "refresh token")
    if access_token is None and refresh_token is None:
        raise AccountTokensRejected("Give an access token, a refresh token, or both.")
    if access_token is not None:
        claims = token_claims(access_token)
        problem = _why_unusable(claims, now=now)
        if problem is None:
            assert claims is not None  # _why_unusable names a token without claims
            _require_identity(claims)
            return ResolvedTokens(access_token, refresh_token, claims, refreshed=False)
        if refresh_token is None:
            raise AccountTokensRejected(
                f"{problem}, and no refresh token was given to get a new one."
            )
    assert refresh_token is not None  # refused above otherwise
    tokens = _exchange(refresh_token, label=label, now=now)
    return resolved_from_token_set(tokens, refresh_token=refresh_token, now=now)


# ----------------------------------------------------------------------------- writes


def _next_refresh(account_id: str, resolved: ResolvedTokens, *, now: datetime) -> datetime:
    margin, _ = refresh_settings()
    return next_refresh_time(
        account_id=account_id,
        expires_at=resolved.claims.expires_at,
        margin_seconds=margin,
        now=now,
    )


def _label(label: str | None) -> str | None:
    label = (label or "").strip() or None
    if label is not None and len(label) > MAX_LABEL_LENGTH:
        raise AccountTokensRejected(f"The label is longer than {MAX_LABEL_LENGTH} characters.")
    return label


def account_upsert_from_tokens(
    *, resolved: ResolvedTokens, now: datetime, label: str | None = None
) -> tuple[Account, bool]:
    """Add the account of ``resolved`` (id ``acct_<uuid hex>``, status active), or give the
    account already holding its ChatGPT identity the new tokens. Returns (account, created).

    One statement, decided by the unique index, so two adds of one identity at once end with
    one account. An updated account comes back into service unless an operator or the upstream
    disabled or banned it (spec §3.1: token updates never reactivate those); a reached quota
    limit keeps it quota_exhausted.
    """
    claims = resolved.claims
    account_id = new_id("acct")
    stored = account_upsert(
        write=AccountWrite(
            new_id=account_id,
            access_token=resolved.access_token,
            refresh_token=resolved.refresh_token,
            access_token_expires_at=claims.expires_at,
            next_refresh_at=_next_refresh(account_id, resolved, now=now),
            chatgpt_account_id=claims.chatgpt_account_id,
            chatgpt_user_id=claims.chatgpt_user_id,
            email=claims.email,
            plan_type=claims.plan_type,
            label=_label(label),
            status=AccountStatus.ACTIVE.value,
            # An add leaves a reached quota limit in force (the account stays quota_exhausted).
            clears_quota_lock=False,
        ),
        now=now,
    )
    assert stored is not None  # no given id: the insert or its conflict update always returns
    stored_id, created = stored
    return Account.objects.get(pk=stored_id), created


def account_tokens_check_owner(*, account: Account, resolved: ResolvedTokens) -> None:
    """Raise AccountTokensRejected when ``resolved`` belongs to another ChatGPT account (or
    user) than ``account`` (one without a known identity accepts any)."""
    claims = resolved.claims
    if account.chatgpt_account_id and claims.chatgpt_account_id != account.chatgpt_account_id:
        raise AccountTokensRejected(
            f"These tokens belong to ChatGPT account {claims.chatgpt_account_id}, not to this "
            f"account's {account.chatgpt_account_id}."
        )
    if (
        account.chatgpt_user_id
        and claims.chatgpt_user_id
        and claims.chatgpt_user_id != account.chatgpt_user_id
    ):
        raise AccountTokensRejected(
            f"These tokens belong to ChatGPT user {claims.chatgpt_user_id}, not to this "
            f"account's {account.chatgpt_user_id}."
        )


def account_rotate_tokens(*, account: Account, resolved: ResolvedTokens, now: datetime) -> Account:
    """Give ``account`` new tokens (its counters, cookies and history stay).

    The tokens must belong to the same ChatGPT account (and user, when both are known); an
    account without a known identity takes the tokens' identity. Raises AccountTokensRejected
    when they belong to another account, or to an identity another account of the pool has.
    """
    account_tokens_check_owner(account=account, resolved=resolved)
    claims = resolved.claims
    changes = {
        "access_token": resolved.access_token,
        "access_token_expires_at": claims.expires_at,
        "next_refresh_at": _next_refresh(account.pk, resolved, now=now),
        "chatgpt_account_id": account.chatgpt_account_id or claims.chatgpt_account_id,
        "chatgpt_user_id": account.chatgpt_user_id or claims.chatgpt_user_id,
        "email": account.email or claims.email,
        "plan_type": claims.plan_type or account.plan_type,
        "status": Case(
            When(
                status__in=(AccountStatus.DISABLED, AccountStatus.BANNED),
                then="status",
            ),
            When(quota_limit_reached=True, then=Value(AccountStatus.QUOTA_EXHAUSTED.value)),
            default=Value(AccountStatus.ACTIVE.value),
            output_field=TextField(),
        ),
        "updated_at": now,
    }
    if resolved.refresh_token:
        changes["refresh_token"] = resolved.refresh_token
    try:
        with transaction.atomic():  # a savepoint: the caller's transaction survives a refusal
            Account.objects.filter(pk=account.pk).update(**changes)
    except IntegrityError as error:
        if "ux_accounts_chatgpt_identity" in str(error):
            raise AccountTokensRejected(
                "Another account of the pool already has the ChatGPT identity of these tokens."
            ) from None
        raise
    account.refresh_from_db()
    return account
