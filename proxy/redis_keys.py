"""Every Redis key the proxy writes, built from REDIS_KEY_PREFIX (``cpr:`` in production).

The contract of seed 004 §4B plus the keys later issues add; docs/redis-keys.md lists each key
with its TTL and what a FLUSHALL does to it. Redis holds nothing that cannot be lost.
"""

from __future__ import annotations

from django.conf import settings


def _prefix() -> str:
    return settings.REDIS_KEY_PREFIX


def admin_session(token_hash: str) -> str:
    """§4B.1 ``cpr:admin:session:<sha256(token)>`` — TTL = session lifetime."""
    return f"{_prefix()}admin:session:{token_hash}"


def admin_user_sessions(user_id: str) -> str:
    """Seed §8 ``cpr:admin:user_sessions:<user_id>`` — SET of the user's session token hashes;
    EXPIRE = the full session lifetime on every add; deleted when a password change ends them."""
    return f"{_prefix()}admin:user_sessions:{user_id}"


def login_attempts(subject: str) -> str:
    """Log-in attempts of one client IP (``ip:<address>``) or username (``user:<hmac>``) in the
    current window: INCR, EXPIRE = the window (15 min) when the first attempt creates it."""
    return f"{_prefix()}login:attempts:{subject}"


def login_lock(subject: str) -> str:
    """A lock-out of one client IP or username: SET with PX = the lock-out (15 min)."""
    return f"{_prefix()}login:lock:{subject}"


def refresh_lease(account_id: str) -> str:
    """§4B.2 ``cpr:lease:refresh:<account_id>`` — TTL = lease duration (PX)."""
    return f"{_prefix()}lease:refresh:{account_id}"


def affinity_response(response_id: str) -> str:
    """§4B.3 ``cpr:affinity:v2:resp:<response_id>`` — EXAT createdAt + affinity TTL."""
    return f"{_prefix()}affinity:v2:resp:{response_id}"


def affinity_conversation(conversation_id: str) -> str:
    """§4B.3 ZSET of response ids of one conversation, scored by createdAt (epoch ms)."""
    return f"{_prefix()}affinity:v2:conv:{conversation_id}"


def affinity_account(account_id: str) -> str:
    """§4B.3 ZSET of response ids served by one account, scored by createdAt (epoch ms)."""
    return f"{_prefix()}affinity:v2:account:{account_id}"


def models_plan_snapshots() -> str:
    """§4B.4 HASH plan_type → {"models": [...], "fetchedAt": ...}; replaced as a whole."""
    return f"{_prefix()}models:plan_snapshots"


def runtime_settings_version() -> str:
    """Counter bumped on every runtime_settings write; caches of the settings compare it.
    No TTL; after a FLUSHALL it restarts from nothing, which every cache treats as "changed"."""
    return f"{_prefix()}settings:version"


def cloudflare_challenges(account_id: str) -> str:
    """Cloudflare challenges of one account in the last hour (INCR, EXPIRE 1 h on each)."""
    return f"{_prefix()}cloudflare:challenges:{account_id}"


def cloudflare_path_blocks(account_id: str) -> str:
    """Empty-404 path blocks of one account in the last hour (INCR, EXPIRE 1 h on each)."""
    return f"{_prefix()}cloudflare:path_blocks:{account_id}"


def scheduler_cursor() -> str:
    """HASH {strategy, cursor}: the shared rotation cursor, reset when the strategy changes.
    EXPIRE 7 days on every use."""
    return f"{_prefix()}scheduler:cursor"


def account_slots(account_id: str) -> str:
    """ZSET slot id → start (epoch ms): in-flight requests of one account. PEXPIRE = slot TTL on
    every acquire; members older than the TTL (crashed workers) are removed on acquire."""
    return f"{_prefix()}scheduler:slots:{account_id}"


def models_etag() -> str:
    """The last ``x-models-etag`` the upstream announced (EX 1 day); a different one queues a
    model refresh."""
    return f"{_prefix()}models:etag"


def refresh_permits() -> str:
    """ZSET permit id → taken at (epoch ms): token calls in flight across every process, capped
    by ``runtime_settings.refresh_concurrency``. PEXPIRE = permit TTL on every take; permits
    older than that (a crashed holder's) are removed on the next take."""
    return f"{_prefix()}refresh:permits"


def oauth_session(session_hash: str) -> str:
    """An OAuth onboarding session (spec §6.3), keyed by SHA-256 of its id; EX 30 minutes."""
    return f"{_prefix()}oauth:session:{session_hash}"


def ledger_rows_given_up() -> str:
    """How many finished requests the ledger writers have given up (their rows are lost):
    INCRBY by the writer that gave them up, EXPIRE 30 days on every increment."""
    return f"{_prefix()}telemetry:ledger_given_up"


# Per-key policies (issue 25; seed §8 "运行态计数走 Redis"). Kept only for keys with a policy row.


def key_policy_requests(key_id: str) -> str:
    """ZSET admission id → admitted at (epoch ms): the key's requests of the last 60 s (the
    sliding requests-per-minute window). Members older than 60 s are removed on each admission;
    PEXPIRE 60 s on every add."""
    return f"{_prefix()}policy:requests:{key_id}"


def key_policy_tokens(key_id: str, window_start: int) -> str:
    """Tokens of the key's requests that finished in the fixed 60 s window starting at
    ``window_start`` (epoch s): INCRBY when a request settles, EXPIRE 120 s."""
    return f"{_prefix()}policy:tokens:{key_id}:{window_start}"


def key_policy_in_flight(key_id: str) -> str:
    """ZSET ``<admission id>:<reserved micro-USD>`` → start or last heartbeat (epoch ms): the
    key's requests in flight, each with what it reserved of the key's budget. Removed when the
    request's report is settled; members older than the slot TTL (a crashed worker's) are
    removed on each admission; PEXPIRE = slot TTL on every add and heartbeat."""
    return f"{_prefix()}policy:in_flight:{key_id}"


def key_policy_cost_high(key_id: str, period: str) -> str:
    """The key's most expensive request in micro-USD in its budget window ``period``
    (``day:YYYY-MM-DD`` with a daily budget, else ``month:YYYY-MM``, UTC), a floor of each
    admitted request's budget reservation: seeded (SET NX, PXAT the window's end) from the
    window's usage rows when missing, then raised (never lowered, KEEPTTL) by every
    settlement of a dearer request."""
    return f"{_prefix()}policy:cost_high:{key_id}:{period}"


def key_policy_model_cost(model: str) -> str:
    """The pool's most expensive request of ``model`` (a catalog id or alias target) in the
    last 7 days in micro-USD, 0 when the pool has none (the default estimate then applies):
    seeded (SET NX, EX 1 day) from usage_records when missing, replaced by each refresh,
    raised (KEEPTTL) by the settlements of keys with a policy."""
    return f"{_prefix()}policy:model_cost:{model}"


def key_policy_model_cost_refresh(model: str) -> str:
    """``1`` while ``key_policy_model_cost(model)`` is fresh: SET NX PX 300 s by the admission
    that finds it gone and so claims the refresh (or by the first seed)."""
    return f"{_prefix()}policy:model_cost_refresh:{model}"


def key_policy_spend(key_id: str, period: str) -> str:
    """The key's spend in micro-USD for ``period`` (``day:YYYY-MM-DD`` / ``month:YYYY-MM``,
    UTC): computed from usage_records when missing (SET NX, EX 60 s), then each settled
    request's cost added while it lives."""
    return f"{_prefix()}policy:spend:{key_id}:{period}"


def idempotency(key_id: str, idempotency_key_hash: str) -> str:
    """One ``Idempotency-Key`` of a client key (its SHA-256, never the value): JSON
    ``{state: pending|done, fingerprint, status?, body?, headers?}``; EX
    IDEMPOTENCY_PENDING_SECONDS while pending, IDEMPOTENCY_TTL_SECONDS once done."""
    return f"{_prefix()}idempotency:{key_id}:{idempotency_key_hash}"


# Fair admission (issue 25 item 2): requests waiting for a slot when every account is at its cap.
# The registry lives while someone polls it: each key's PEXPIRE is pushed out on every poll.


def fair_turns() -> str:
    """ZSET client key id → place in the rotation (lowest first): the keys with requests
    waiting. A key served moves to the end; one whose last waiter leaves is removed (an empty
    ZSET is no key, which is what the scheduler's fast path checks). PEXPIRE = registry TTL."""
    return f"{_prefix()}fair:turns"


def fair_queue(key_id: str) -> str:
    """ZSET waiter id → arrival number: one key's waiting requests, first come first.
    PEXPIRE = registry TTL. ``fair_queue("")`` is the prefix the admission script extends."""
    return f"{_prefix()}fair:queue:{key_id}"


def fair_waiter(waiter_id: str) -> str:
    """HASH {key, seen (epoch ms of its last poll), accounts (",id,id,")}: one waiting request.
    PEXPIRE = registry TTL; older than the heartbeat limit it counts as gone and is pruned.
    ``fair_waiter("")`` is the prefix the admission script extends."""
    return f"{_prefix()}fair:waiter:{waiter_id}"


def fair_sequence() -> str:
    """Counter handing out arrival numbers and rotation places (INCR). PEXPIRE = registry TTL
    on every poll; after a FLUSHALL it is raised past the numbers waiters still hold."""
    return f"{_prefix()}fair:sequence"
