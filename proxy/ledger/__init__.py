"""The proxy's ledger: what a finished ``/v1`` request leaves behind (``entries``) and the
batch writer that lands it in telemetry's tables through ``telemetry.services`` (``writer``)."""
