"""What happens once a dispatch has its frozen report, besides the ledger: the one place the
report is handed on (``Dispatch._finish`` calls ``finished_dispatch`` exactly once).

The key policy settles (slot freed, tokens and cost counted) and the request metrics are
recorded, both from the same report and ledger entry, so they agree with the usage rows.
"""

from __future__ import annotations

from proxy.domain.dispatch_types import DispatchReport
from proxy.ledger.entries import LedgerEntry
from proxy.metrics.recording import record_dispatch
from proxy.policies import admission


def finished_dispatch(report: DispatchReport, entry: LedgerEntry) -> None:
    admission.settle_later(report.request, entry.usage)
    record_dispatch(report)
