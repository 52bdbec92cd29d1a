"""The upstream WebSocket pool (spec §2.7), one per event loop.

Key = (base URL, local account id, local conversation id or previous response id). One slot per
key: a key whose socket is in use hands out a one-shot socket instead (closed after its
response, never pinged); an account with ``CODEX_WS_POOL_MAX_PER_ACCOUNT`` pooled sockets gets
one-shot sockets too. A pooled socket lives at most ``CODEX_WS_MAX_AGE_SECONDS`` (the upstream
closes sockets after about an hour, §11.15); a sweep every ``CODEX_WS_SWEEP_SECONDS`` closes
dead or expired idle sockets and forgets reservations older than the max age, closing their
sockets too (a reservation that old belongs to a request that never ended; its socket would
otherwise stay open with nobody reading it). Each socket remembers the id of the latest
response it completed, for connection-local continuations (``store:false`` with a previous id
known only to that socket), and whose (the opaque owner — the client key — of the requests it
carried): a continuation finds only its owner's sockets (issue 34; the conversation id of the
key already makes the key the owner's alone).

An account's sockets are evicted when its status changes (an operator disabling it, spec §6.3,
or the scheduler taking it out of service): ``follow_account_statuses`` is handed the account
statuses of each new pool snapshot and evicts the accounts whose status moved or which left
the snapshot. Eviction closes the idle sockets at once and frees the leased ones' slots, so a
response in flight ends normally and its socket is closed after it instead of going back to
the pool. Every web process has its own pools and learns of a change from the snapshot's
version (``proxy.pool_snapshot``): on its next request, or on the sweep (``on_sweep`` hooks)
when it has sockets and no requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from django.conf import settings

from common import clock
from proxy.loop_resources import PerLoop, on_loop_close

logger = logging.getLogger(__name__)

PoolKey = tuple[str, str, str]


# The opening headers a socket is bound to: who it speaks as, and as which device.
IDENTITY_HEADERS = ("authorization", "chatgpt-account-id", "originator", "user-agent", "sec-ch-ua")


def identity_of(headers: list[tuple[str, str]]) -> str:
    """A digest of the identity headers of an opening (the token is never kept in clear)."""
    values = dict((name.lower(), value) for name, value in headers)
    joined = "\0".join(values.get(name, "") for name in IDENTITY_HEADERS)
    return hashlib.sha256(joined.encode()).hexdigest()


@dataclass(eq=False)
class UpstreamSocket:
    """One open upstream WebSocket and what the pool knows of it."""

    websocket: aiohttp.ClientWebSocketResponse
    account_id: str
    headers: dict[str, str]
    set_cookies: tuple[str, ...]
    opened_at: float = field(default_factory=clock.monotonic)
    latest_response_id: str | None = None
    # Which credentials and device identity the socket was opened with (``identity_of``).
    identity: str = ""
    # Requests this socket has carried (a reused socket may have died while idle).
    uses: int = 0
    # Whose requests it carries (the client key): only theirs may continue its responses.
    owner: str | None = None

    @property
    def dead(self) -> bool:
        return self.websocket.closed or self.websocket.exception() is not None

    def expired(self, now: float) -> bool:
        return now - self.opened_at >= settings.CODEX_WS_MAX_AGE_SECONDS


def pool_decision(kind: str, reason: str | None = None) -> dict[str, str]:
    """How the pool served a request, as the ledger's ``websocketPool`` records it: ``kind``
    new (a fresh pooled socket), reuse (an idle one), bypass (a one-shot socket, ``reason``
    busy, cap or disabled) or retry_after_stale_reuse (a reused socket died first)."""
    return {"kind": kind} if reason is None else {"kind": kind, "reason": reason}


@dataclass(eq=False)
class Lease:
    """A request's hold on a key: ``pooled`` (it owns the key's slot) or one-shot."""

    key: PoolKey
    account_id: str
    pooled: bool
    socket: UpstreamSocket | None = None
    reserved_at: float = field(default_factory=clock.monotonic)
    decision: dict[str, str] = field(default_factory=lambda: pool_decision("new"))
    owner: str | None = None

    @property
    def reused(self) -> bool:
        return self.socket is not None and self.socket.uses > 0


class WebSocketPool:
    def __init__(self) -> None:
        self._idle: dict[PoolKey, UpstreamSocket] = {}
        self._leased: dict[PoolKey, Lease] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # The account statuses of the latest pool snapshot taken in (follow_account_statuses).
        self._statuses: Mapping[str, str] | None = None
        self._statuses_version = -1
        # Counters the tests and the docs speak of.
        self.opened = 0
        self.reused = 0

    # -- what the requests do

    def lease(
        self, key: PoolKey, account_id: str, identity: str | None = None, owner: str | None = None
    ) -> Lease:
        """The key's idle socket (alive, not expired, opened with ``identity`` when given,
        ``owner``'s) or a reservation to open one; a one-shot lease when the key is busy or the
        account is at its cap."""
        self._ensure_sweeper()
        if key in self._leased:
            return Lease(
                key,
                account_id,
                pooled=False,
                decision=pool_decision("bypass", "busy"),
                owner=owner,
            )
        socket = self._idle.pop(key, None)
        if socket is not None and (
            socket.dead
            or socket.expired(clock.monotonic())
            # A refreshed token or an updated fingerprint: the opening's headers are stale.
            or (identity is not None and socket.identity != identity)
            # Another owner's socket under this key: never carried over.
            or socket.owner != owner
        ):
            self._close(socket)
            socket = None
        at_cap = self._pooled_count(account_id) >= settings.CODEX_WS_POOL_MAX_PER_ACCOUNT
        if socket is None and at_cap:
            reason = "disabled" if settings.CODEX_WS_POOL_MAX_PER_ACCOUNT == 0 else "cap"
            return Lease(
                key,
                account_id,
                pooled=False,
                decision=pool_decision("bypass", reason),
                owner=owner,
            )
        lease = Lease(key, account_id, pooled=True, socket=socket, owner=owner)
        if socket is not None:
            self.reused += 1
            lease.decision = pool_decision("reuse")
        self._leased[key] = lease
        return lease

    def socket_for_response(
        self, key_prefix: tuple[str, str], response_id: str, owner: str | None = None
    ) -> PoolKey | None:
        """The key of ``owner``'s pooled socket (idle or leased) of this base URL and account
        whose latest response is ``response_id``."""
        for key, socket in self._idle.items():
            if (
                key[:2] == key_prefix
                and socket.owner == owner
                and socket.latest_response_id == response_id
            ):
                return key
        for key, lease in self._leased.items():
            if (
                key[:2] == key_prefix
                and lease.owner == owner
                and lease.socket is not None
                and lease.socket.latest_response_id == response_id
            ):
                return key
        return None

    def is_leased(self, key: PoolKey) -> bool:
        return key in self._leased

    def held_by(self, key: PoolKey, owner: str | None) -> str | None:
        """How ``owner`` holds the key's pooled slot: "leased", "idle", or None (not at all, or
        another owner does)."""
        lease = self._leased.get(key)
        if lease is not None:
            return "leased" if lease.owner == owner else None
        socket = self._idle.get(key)
        return "idle" if socket is not None and socket.owner == owner else None

    def give_back(self, lease: Lease) -> None:
        """The lease's socket completed its response: pooled → idle again; one-shot, or a
        lease whose slot was taken from it meanwhile (evicted, forgotten by the sweep) →
        closed."""
        socket = lease.socket
        owned = self._owns_slot(lease)
        if owned:
            del self._leased[lease.key]
        if socket is None:
            return
        socket.uses += 1
        if owned and not socket.dead and not socket.expired(clock.monotonic()):
            socket.owner = lease.owner
            self._idle[lease.key] = socket
        else:
            self._close(socket)
            lease.socket = None

    def drop(self, lease: Lease) -> None:
        """The lease ended badly (failed, cancelled, broken): its socket is closed, its slot
        freed."""
        if self._owns_slot(lease):
            del self._leased[lease.key]
        if lease.socket is not None:
            self._close(lease.socket)
            lease.socket = None

    def _owns_slot(self, lease: Lease) -> bool:
        """Whether ``lease`` still holds its key's slot (a later lease may hold it now)."""
        return lease.pooled and self._leased.get(lease.key) is lease

    def evict_account(self, account_id: str) -> int:
        """Close the account's idle sockets and free its leased slots: a response in flight
        ends normally, then its socket is closed rather than pooled. Returns how many sockets
        were affected."""
        evicted = 0
        for key, socket in list(self._idle.items()):
            if key[1] == account_id:
                del self._idle[key]
                self._close(socket)
                evicted += 1
        for key, lease in list(self._leased.items()):
            if lease.account_id == account_id:
                del self._leased[key]
                evicted += 1
        if evicted:
            logger.info("websocket pool: %d socket(s) of account %s evicted", evicted, account_id)
        return evicted

    def follow_account_statuses(self, version: int, statuses: Mapping[str, str]) -> list[str]:
        """Take in the account statuses of pool snapshot ``version`` (account id → status;
        an account missing from it is out of service): the accounts holding sockets whose
        status changed since the last version seen, or which left, are evicted. Older or
        already seen versions are ignored. Returns the evicted account ids."""
        if version <= self._statuses_version:
            return []
        previous, self._statuses = self._statuses, statuses
        self._statuses_version = version
        if previous is None:
            return []  # the first snapshot this pool sees: nothing to compare with
        changed = [
            account_id
            for account_id in self._accounts_with_sockets()
            if statuses.get(account_id) != previous.get(account_id)
        ]
        for account_id in changed:
            self.evict_account(account_id)
        return changed

    def _accounts_with_sockets(self) -> set[str]:
        accounts = {key[1] for key in self._idle}
        accounts.update(lease.account_id for lease in self._leased.values())
        return accounts

    def has_sockets(self) -> bool:
        """Whether any socket is pooled here (idle or leased)."""
        return bool(self._idle or self._leased)

    def forget_socket(self, lease: Lease) -> None:
        """Close the lease's socket but keep its slot (a fresh socket takes its place)."""
        if lease.socket is not None:
            self._close(lease.socket)
            lease.socket = None

    # -- upkeep

    def _pooled_count(self, account_id: str) -> int:
        counts = Counter(key[1] for key in self._idle)
        counts.update(lease.account_id for lease in self._leased.values())
        return counts[account_id]

    def idle_count(self) -> int:
        return len(self._idle)

    def _close(self, socket: UpstreamSocket) -> None:
        if socket.websocket.closed:
            return
        task = asyncio.get_running_loop().create_task(_close_quietly(socket.websocket))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(settings.CODEX_WS_SWEEP_SECONDS)
            self.sweep()
            for hook in _sweep_hooks:
                try:
                    await hook(self)
                except Exception:  # the sweep goes on; the next round tries again
                    logger.warning("websocket pool sweep hook failed", exc_info=True)

    def sweep(self) -> None:
        """Close dead or expired idle sockets; forget reservations older than the max age
        and close their sockets (nobody will read them: their request never ended)."""
        now = clock.monotonic()
        for key, socket in list(self._idle.items()):
            if socket.dead or socket.expired(now):
                del self._idle[key]
                self._close(socket)
        for key, lease in list(self._leased.items()):
            if now - lease.reserved_at >= settings.CODEX_WS_MAX_AGE_SECONDS:
                del self._leased[key]
                logger.warning(
                    "websocket pool: a reservation of account %s outlived the max age; "
                    "its socket is closed",
                    lease.account_id,
                )
                if lease.socket is not None:
                    self._close(lease.socket)
                    lease.socket = None

    async def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        sockets = list(self._idle.values())
        self._idle.clear()
        # At once, not one after another: a stop must not wait 2 s per silent upstream.
        await asyncio.gather(*(_close_quietly(socket.websocket) for socket in sockets))


async def _close_quietly(websocket: aiohttp.ClientWebSocketResponse) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2):
            await websocket.close()


websocket_pool: PerLoop[WebSocketPool] = PerLoop(WebSocketPool)

# Run after each sweep with the pool (coroutine functions): what the request path registers
# to keep a pool in step while its process serves no requests (``proxy.pool_snapshot``).
_sweep_hooks: list[Callable[[WebSocketPool], Awaitable[None]]] = []


def on_sweep(hook: Callable[[WebSocketPool], Awaitable[None]]) -> None:
    """Have every pool's sweep also await ``hook(pool)``; a failing hook is logged."""
    _sweep_hooks.append(hook)


async def _close_this_loops_pool() -> None:
    pool = websocket_pool.pop()
    if pool is not None:
        await pool.close_all()


on_loop_close(_close_this_loops_pool)
