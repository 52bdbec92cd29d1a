"""Client keys on ``/v1`` (spec §1.2): one unique-index lookup per request, no in-process table.

For the responses routes the same statement reads the key's policy (issue 25) and the version
of the pool snapshot (``proxy.pool_snapshot``: the hot runtime settings, the fingerprint and
the candidate accounts, kept in memory and read again only when that version moved), so a
request costs one PostgreSQL round trip before the first byte; the models routes read only the
key and the aliases. ``last_used_at`` is touched in batches after a 1 s debounce.

A refused key says which of missing, unknown or disabled it is (``KeyRefused``; issue 38 — the
original answers all three alike, spec §1.2); the key itself is never echoed or logged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psycopg
from django.utils import timezone
from psycopg_pool import PoolTimeout

from proxy.accounts import AccountView
from proxy.clients.codex import FingerprintHeaders
from proxy.domain.key_policy import (
    POLICY_COLUMN_COUNT,
    POLICY_COLUMNS_SQL,
    KeyPolicy,
    policy_from_row,
    resolved_model_names,
)
from proxy.domain.slots import SchedulerSettings
from proxy.loop_resources import (
    DATABASE_ACQUIRE_TIMEOUT_SECONDS,
    PerLoop,
    database_connection,
    discard_dead_connections,
)
from proxy.models_catalog import clean_aliases, resolve_alias
from proxy.pool_snapshot import POOL_VERSION_SQL, PoolSnapshot, pool_snapshot

logger = logging.getLogger(__name__)

KEY_PREFIX = "sk_"
TOUCH_DEBOUNCE_SECONDS = 1.0

# Both statements read the key whether or not it is enabled (their last column says), so a
# disabled key is told so; the unique index on ``key`` is used all the same.
_KEY_AND_VERSION_SQL = (
    "select k.id, "
    + POLICY_COLUMNS_SQL
    + ", "
    + POOL_VERSION_SQL
    + """, k.enabled
from client_api_keys k
left join client_api_key_policies p on p.key_id = k.id
where k.key = %(key)s
"""
)
# The models routes need only the key and the aliases (no candidates, no fingerprint).
_KEY_AND_ALIASES_SQL = """
select k.id, s.model_aliases_json, p.allowed_models, k.enabled
from client_api_keys k
left join runtime_settings s on s.id = 1
left join client_api_key_policies p on p.key_id = k.id
where k.key = %(key)s
"""


@dataclass(frozen=True, kw_only=True)
class KeyHolder:
    """A verified client key and the model aliases it sees (what the models routes need);
    ``allowed_models``: its policy's list, alias-resolved (None = every model)."""

    key_id: str
    aliases: dict[str, str]
    allowed_models: frozenset[str] | None = None

    def may_use(self, model: str) -> bool:
        """Whether the key's policy lets it use ``model`` (a name or an alias)."""
        return self.allowed_models is None or resolve_alias(model, self.aliases) in (
            self.allowed_models
        )


@dataclass(frozen=True, kw_only=True)
class AuthenticatedClient(KeyHolder):
    """The verified key plus what the request path needs from runtime_settings and the
    fingerprint, read in the same round trip."""

    scheduler_settings: SchedulerSettings
    fingerprint: FingerprintHeaders
    # The candidate accounts, read in the same statement (spec §3.2 input of the scheduler);
    # a policy's account group already applied.
    accounts: list[AccountView]
    # The key's policy row (issue 25), LEFT JOINed in the same statement; None = unlimited.
    policy: KeyPolicy | None = None


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (exact ``Bearer `` prefix, trimmed), or
    None when the header carries none."""
    if not authorization or not authorization.startswith("Bearer "):
        return None
    return authorization[len("Bearer ") :].strip() or None


class KeyRefusal(StrEnum):
    MISSING = "missing"  # no ``Authorization: Bearer <token>``
    UNKNOWN = "unknown"  # a token that is no key of this proxy
    DISABLED = "disabled"  # a key an operator disabled


class KeyRefused(Exception):
    """The request carries no usable client key; ``reason`` says why (never the key)."""

    def __init__(self, reason: KeyRefusal) -> None:
        super().__init__(reason.value)
        self.reason = reason


class KeyLookupUnavailable(Exception):
    """The key could not be checked because the database did not answer (not a bad key)."""


async def _key_row(authorization: str | None, sql: str) -> tuple[Any, ...]:
    """The row of ``sql`` for the enabled key of ``authorization`` without its last column
    (``enabled``); the key's use is recorded.

    Raises KeyRefused when the header carries no key (``missing``), a token that is no key of
    ours (``unknown``; one without the ``sk_`` prefix is not looked up) or a disabled key.
    Raises KeyLookupUnavailable when the database fails: a connection that died while idle is
    retried once on a fresh one; after that the client is told the truth (503), not that its
    key is wrong.
    """
    token = bearer_token(authorization)
    if token is None:
        raise KeyRefused(KeyRefusal.MISSING)
    if not token.startswith(KEY_PREFIX):
        raise KeyRefused(KeyRefusal.UNKNOWN)
    parameters = {"key": token, "now": timezone.now()}
    for attempt in (1, 2):
        try:
            # A server that stopped answering (no reset, no reply) must not hang the request.
            async with asyncio.timeout(DATABASE_ACQUIRE_TIMEOUT_SECONDS):
                async with database_connection() as connection:
                    cursor = await connection.execute(sql, parameters)
                    row = await cursor.fetchone()
            break
        except (PoolTimeout, TimeoutError) as error:  # nothing within the budget: no retry
            logger.warning(
                "client key lookup: the database did not answer (%s)", type(error).__name__
            )
            raise KeyLookupUnavailable from error
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            if attempt == 2:
                logger.warning("client key lookup failed twice: %s", type(error).__name__)
                raise KeyLookupUnavailable from error
            logger.info("client key lookup hit a dead connection; retrying on a fresh one")
            await discard_dead_connections()
        except psycopg.Error as error:
            logger.warning("client key lookup failed: %s", type(error).__name__)
            raise KeyLookupUnavailable from error
    if row is None:
        raise KeyRefused(KeyRefusal.UNKNOWN)
    if not row[-1]:
        raise KeyRefused(KeyRefusal.DISABLED)
    _touches.get_or_create().touch(row[0])
    return tuple(row[:-1])


async def authenticate_key(authorization: str | None) -> KeyHolder:
    """The enabled key and its aliases (the models routes). Raises KeyRefused when the header
    carries no enabled key, KeyLookupUnavailable when the database fails."""
    row = await _key_row(authorization, _KEY_AND_ALIASES_SQL)
    key_id, aliases, allowed = row
    aliases = clean_aliases(aliases)
    return KeyHolder(
        key_id=key_id, aliases=aliases, allowed_models=resolved_model_names(allowed, aliases)
    )


async def authenticate(authorization: str | None) -> AuthenticatedClient:
    """The enabled key's client, the current settings and the candidate accounts. Raises
    KeyRefused when the header carries no enabled key, KeyLookupUnavailable when the database
    fails."""
    row = await _key_row(authorization, _KEY_AND_VERSION_SQL)
    key_id = row[0]
    policy_columns = row[1 : 1 + POLICY_COLUMN_COUNT]
    snapshot = await _snapshot(int(row[-1]))
    policy = policy_from_row(key_id, policy_columns, snapshot.aliases)
    return AuthenticatedClient(
        key_id=key_id,
        aliases=snapshot.aliases,
        policy=policy,
        allowed_models=policy.allowed_models if policy is not None else None,
        scheduler_settings=snapshot.scheduler_settings,
        fingerprint=snapshot.fingerprint,
        accounts=snapshot.candidates(policy.account_group if policy is not None else None),
    )


async def _snapshot(version: int) -> PoolSnapshot:
    """The pool snapshot at ``version`` (or newer); raises KeyLookupUnavailable when it had to
    be read again and the database failed (the same 503 as a failed key lookup). Each reading
    has the database budget of its own (``proxy.pool_snapshot``)."""
    try:
        return await pool_snapshot(version)
    except (TimeoutError, psycopg.Error) as error:
        logger.warning("pool snapshot read failed: %s", type(error).__name__)
        raise KeyLookupUnavailable from error


class KeyTouches:
    """Collects used key ids and writes ``last_used_at`` once per second at most."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._flush_task: asyncio.Task[None] | None = None

    def touch(self, key_id: str) -> None:
        self._pending.add(key_id)
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        # Keys touched while a flush runs find this task still running (touch() starts none):
        # they are written by the next round here, not left waiting for a later touch.
        while self._pending:
            await asyncio.sleep(TOUCH_DEBOUNCE_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        ids, self._pending = self._pending, set()
        if not ids:
            return
        try:
            async with database_connection() as connection:
                await connection.execute(
                    "update client_api_keys set last_used_at = %s where id = any(%s)",
                    [timezone.now(), list(ids)],
                )
        except Exception:
            logger.warning("could not record key use; retrying with the next batch", exc_info=True)
            self._pending |= ids


_touches: PerLoop[KeyTouches] = PerLoop(KeyTouches)


async def flush_key_touches() -> None:
    await _touches.get_or_create().flush()
