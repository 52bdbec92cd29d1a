"""The admin JSON API (codex-proxy spec §6): ``/api/admin/*`` over DRF.

Every answer is the envelope ``{"code", "message", "data"}`` with ``Cache-Control: no-store``
(``envelope``); an admin is the ``cpr_admin_session`` cookie of the shared session store or the
``x-api-key`` header (``authentication``); lists page by ``page``/``pageSize`` or by a keyset
``cursor`` (``pagination``); times are shown in the console's time zone (``display``). Reads
live in ``selectors`` (accounts) and ``telemetry.queries`` (the ledger); writes go through
``proxy.services``; the connection test, quota fetch and model fetch go through ``pool``, the one
module that reaches into the request path's code.
"""
