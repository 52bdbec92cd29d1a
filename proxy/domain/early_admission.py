"""A key's admission made before its request's body was read (issue 35 item 4).

The ``/v1`` handler admits a request of a key with a policy from the headers alone — the
requests window, the tokens window, the concurrency and the budgets need no body — so that a
key over one of them is answered before the server takes in up to 16 MiB. That admission *is*
the request's admission, counted once: the dispatch takes it over (``take_over``) instead of
admitting again, and settles it with its report as usual. The allowed-models check needs the
body's model and still runs in the dispatch, before it takes the admission over; so does the
rest of a budget's estimate (``proxy.policies.estimate``: the reservation is raised then when
the body's model or size asks for more).

A request that ends before a dispatch took its admission over (a 400, a 404, a 403 for its
model, an idempotent replay, the client gone while sending the body) gives the admission back
(``proxy.policies.admission.withdraw_if_not_taken``): its in-flight member and its entry in the
requests window are removed, so it counted for nothing — as a request refused after its body
always did.
"""

from __future__ import annotations

import enum
import secrets

from common import clock
from proxy.domain.key_policy import KeyPolicy


def in_flight_member(admission_id: str, reserved_micro: int) -> str:
    """A request's member of the in-flight ZSET: its admission id and the micro-USD it
    reserved of the key's budget (0 without one), so the reservation goes wherever the
    member goes."""
    return f"{admission_id}:{reserved_micro}"


def new_admission_id() -> str:
    """A request's name in its key's policy counters (random: it is no secret, and unique)."""
    return secrets.token_hex(8)


class _State(enum.Enum):
    PENDING = "pending"  # admitted, waiting for its dispatch
    TAKEN = "taken"  # a dispatch holds it and settles it with its report
    WITHDRAWN = "withdrawn"  # given back: the request ended without a dispatch taking it


class EarlyAdmission:
    """One request's admission by its key's policy, made before its body was read.

    ``take_over`` and ``withdraw`` run on the request's event loop: the state
    changes without an ``await`` in between, so exactly one of them wins."""

    def __init__(
        self,
        policy: KeyPolicy,
        admission_id: str,
        reserved_micro: int,
        *,
        key_high_micro: int = 0,
        model_highs: dict[str, int] | None = None,
    ) -> None:
        self.policy = policy
        self.admission_id = admission_id
        self.reserved_micro = reserved_micro
        # What the admission read of the budget's history (micro-USD): the key's high-water
        # and the priors of the models it counted (its allowed ones), so that the dispatch
        # knows without Redis whether the body's estimate is more than was reserved.
        self.key_high_micro = key_high_micro
        self.model_highs = model_highs or {}
        self._admitted_monotonic = clock.monotonic()
        self._state = _State.PENDING

    @property
    def member(self) -> str:
        """Its member of the key's in-flight ZSET."""
        return in_flight_member(self.admission_id, self.reserved_micro)

    def age_seconds(self) -> float:
        """How long ago it was admitted (its member's last sign of life)."""
        return clock.monotonic() - self._admitted_monotonic

    @property
    def pending(self) -> bool:
        """Neither taken over by a dispatch nor given back yet."""
        return self._state is _State.PENDING

    def take_over(self) -> bool:
        """The dispatch takes the admission (True once, unless it was given back first); it
        then settles it with its report."""
        if self._state is not _State.PENDING:
            return False
        self._state = _State.TAKEN
        return True

    def withdraw(self) -> bool:
        """Give the admission back unless a dispatch took it: True once, when it was pending
        (the caller then removes its counters, ``admission.withdraw_if_not_taken``)."""
        if self._state is not _State.PENDING:
            return False
        self._state = _State.WITHDRAWN
        return True
