"""The values of one dispatch: its request, what each attempt left, and the frozen report.

``DispatchRequest`` is built by the view from a validated client request; ``Dispatch`` fills an
``AttemptNote`` per attempt and ends with one ``DispatchReport``, which the ledger turns into
facts. ``ClientFailure`` (defined in ``proxy.domain.client_errors``, re-exported here) is the
one exception a dispatch (or a view's parsing) raises for an answer in the OpenAI error
envelope; ``proxy.v1.errors.openai_errors`` maps it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

from common import clock
from proxy.accounts import AccountView
from proxy.clients.codex import CodexStream, CodexWebSocketStream, FingerprintHeaders
from proxy.domain.client_errors import ClientError, ClientFailure  # noqa: F401 - part of the types
from proxy.domain.conversation import local_conversation_id
from proxy.domain.early_admission import EarlyAdmission, new_admission_id
from proxy.domain.failures import AttemptFailure
from proxy.domain.key_policy import KeyPolicy
from proxy.domain.slots import SchedulerSettings, Slot
from proxy.domain.sse import Frame, SSEScanner
from proxy.domain.upstream_request import ClientIdentity
from proxy.models_catalog import Catalog


@dataclass
class RequestTiming:
    """Where a ``/v1`` request's time before its first byte went (``x-cpr-overhead-ms``): the
    handler stamps its arrival and the wait for the client's body; the attempts add the time
    spent waiting for the upstream calls that answer it (failed attempts included)."""

    arrived: float = field(default_factory=clock.monotonic)
    client_wait: float = 0.0
    upstream_wait: float = 0.0

    def overhead_ms(self, *, now: float | None = None) -> float:
        """Milliseconds the proxy itself added before the answer's first byte (now)."""
        now = clock.monotonic() if now is None else now
        spent = now - self.arrived - self.client_wait - self.upstream_wait
        return max(0.0, spent * 1000)


@dataclass
class DispatchRequest:
    """Everything the dispatcher needs to know about one validated client request."""

    request_id: str
    route: str
    requested_model: str
    model: str
    body: dict
    stream: bool
    scheduler_settings: SchedulerSettings
    fingerprint: FingerprintHeaders
    catalog: Catalog  # plan allowlists of the model
    accounts: list[AccountView]  # the candidates, read together with the client key
    client_identity: ClientIdentity = field(default_factory=ClientIdentity)
    client_api_key_id: str | None = None
    client_ip: str | None = None
    user_agent: str | None = None
    subagent: str | None = None
    # /v1/responses streams answer 5xx-class failures as a 200 SSE failure event (spec §1.7).
    failures_as_events: bool = False
    # The key's policy (None: unlimited), read with the key; ``admission_id`` names this
    # request in the policy's Redis counters, ``key_admitted`` says it holds a slot there and
    # ``key_reserved_micro`` what it reserved of the key's budget (micro-USD).
    # ``early_admission``: the admission the /v1 handler made before the body was read, for
    # the dispatch to take over (``proxy.domain.early_admission``).
    key_policy: KeyPolicy | None = None
    early_admission: EarlyAdmission | None = None
    admission_id: str = field(default_factory=new_admission_id)
    key_admitted: bool = False
    key_reserved_micro: int = 0
    # The client's use_websocket (removed from the body): False forces HTTP SSE (spec §1.8).
    use_websocket: bool | None = None
    # The client's raw body size in bytes.
    body_bytes: int = 0
    started_at: datetime = field(default_factory=clock.now)
    started_monotonic: float = field(default_factory=clock.monotonic)
    timing: RequestTiming = field(default_factory=RequestTiming)

    @property
    def previous_response_id(self) -> str | None:
        value = self.body.get("previous_response_id")
        return value if isinstance(value, str) and value else None

    @functools.cached_property
    def conversation_id(self) -> str:
        """The local conversation id (``lc_…``, spec §2.5): affinity and the WebSocket pool's
        key, the client key's own; never sent upstream."""
        return local_conversation_id(self.body, self.client_identity, self.client_api_key_id)

    def elapsed_ms(self) -> int:
        return int((clock.monotonic() - self.started_monotonic) * 1000)


@dataclass
class StreamProgress:
    """What the scanner learnt from the upstream stream so far."""

    response_id: str | None = None
    first_token_ms: int | None = None
    terminal_event: str | None = None
    terminal: dict | None = None
    done_seen: bool = False
    output_seen: bool = False


@dataclass(frozen=True)
class AttemptNote:
    index: int
    account_id: str
    failure: AttemptFailure | None = None


@dataclass
class Committed:
    """An upstream stream that reached real output (or a terminal event) on ``slot``'s account
    (for non-stream clients: read to its end)."""

    slot: Slot
    attempt_index: int
    stream: CodexStream | CodexWebSocketStream
    upstream_headers: dict[str, str]
    buffered: list[bytes]
    scanner: SSEScanner
    progress: StreamProgress
    buffered_frames: list[Frame] = field(default_factory=list)
    response_object: dict | None = None  # the terminal ``response`` of a completed read

    @property
    def account(self) -> AccountView:
        return self.slot.account


@dataclass(frozen=True)
class CompactResult:
    slot: Slot
    attempt_index: int
    upstream_headers: dict[str, str]
    body: bytes
    payload: object

    @property
    def account(self) -> AccountView:
        return self.slot.account


@dataclass(frozen=True)
class StreamEnd:
    """How a committed stream ended."""

    client_cancelled: bool = False
    synthetic_failure: bool = False
    stream_error: str | None = None
    # Cut at the graceful stop's deadline (the client got a ``server_shutdown`` event).
    server_shutdown: bool = False


@dataclass(frozen=True)
class Served:
    """The attempt that answered."""

    account: AccountView
    attempt_index: int
    upstream_headers: dict[str, str]
    progress: StreamProgress | None = None
    response_object: dict | None = None
    compact_payload: object = None
    # How the upstream WebSocket pool served it (``{kind, reason?}``); None over HTTP.
    websocket_pool: dict[str, str] | None = None

    @classmethod
    def of_committed(cls, committed: Committed) -> Served:
        return cls(
            account=committed.account,
            attempt_index=committed.attempt_index,
            upstream_headers=committed.upstream_headers,
            progress=committed.progress,
            response_object=committed.response_object,
            websocket_pool=getattr(committed.stream, "pool_decision", None),
        )

    @classmethod
    def of_compact(cls, result: CompactResult) -> Served:
        payload = result.payload if isinstance(result.payload, dict) else {}
        return cls(
            account=result.account,
            attempt_index=result.attempt_index,
            upstream_headers=result.upstream_headers,
            compact_payload=payload,
        )


@dataclass(frozen=True)
class DispatchReport:
    """Everything one finished dispatch tells the ledger (built once, never changed)."""

    request: DispatchRequest
    transport: str
    notes: tuple[AttemptNote, ...]
    captured_cookies: tuple[tuple[str, tuple[dict, ...]], ...]
    final_failure: AttemptFailure | None = None
    client_error: ClientError | None = None
    exhausted_count: int = 0
    served: Served | None = None
    end: StreamEnd = StreamEnd()
