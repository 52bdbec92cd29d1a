"""Whose a previous response id is when Redis has no record of it (issue 34).

Redis may lose an affinity record at any time (its 4 h TTL, a FLUSHALL, an eviction: seed
§2.9); the response's ownership must not go with it, or another key presenting the id would
have it sent untouched to one account (spec §5.3's "external unknown") — the owner's, now and
then, which would continue the owner's conversation for it. The durable answer is the ledger:
``usage_records`` holds every success with its ``response_id``, ``client_api_key_id`` and
``account_id`` (one query through the seed's partial index, asked only on this path, never
on the hot path):

* a row of another key (or of none) → the id is another's: answered as never existing;
* a row of the request's key → the id is its own: the one attempt goes to the row's account
  (the account that can know it, rather than whichever ranks first);
* no row → unknown, as the spec says (also: ``TELEMETRY_ENABLED`` off writes no rows, and the
  retention trim removes old ones);
* the ledger cannot be read → another's: an id is never sent anywhere on a guess.

The ledger's rows are written in batches (``LEDGER_FLUSH_INTERVAL_MS`` after a response ended),
the Redis record at once and before the client has the answer's last byte; a continuation
arriving in between finds the record (``proxy.ledger.affinity.wait_if_pending`` waits for this
process's record still being written).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proxy.selectors import response_ownership

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerVerdict:
    """``foreign``: the id is another key's (or nobody's); ``account_id``: the account of the
    request's own key's row, where its one attempt goes first."""

    foreign: bool = False
    account_id: str | None = None


async def ledger_verdict(response_id: str, *, client_key_id: str | None) -> LedgerVerdict:
    """What the ledger says of ``response_id`` for ``client_key_id``; a failure is logged
    (without the id) and answers "foreign"."""
    try:
        owner = await response_ownership(response_id, client_key_id=client_key_id)
    except Exception as error:
        logger.warning("ledger ownership lookup failed (%s)", type(error).__name__)
        return LedgerVerdict(foreign=True)
    if owner is None:
        return LedgerVerdict()
    if owner.of_another_key:
        return LedgerVerdict(foreign=True)
    return LedgerVerdict(account_id=owner.account_id)
