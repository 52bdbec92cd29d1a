"""Per-key policies (issue 25 item 1): the limits of ``client_api_key_policies`` enforced on
``/v1`` with counters in Redis shared by every process.

``rules`` — the policy a request carries (read with the client key, one round trip) and the
pure checks; ``counters`` — the Redis side (one Lua call to admit, one to settle, a read for
the consoles; their Lua in ``counter_scripts``); ``spend`` — the key's cost today / this month
from ``usage_records``; ``estimate`` — what a request reserves of a budget, before its body and
after, from ``cost_history`` (the key's and the pool's dearest requests); ``admission`` — what
the dispatch calls before scheduling and after the report (and the /v1 handler before the body,
the client WebSocket when a frame arrives); ``early`` — an admission made from the headers,
before the body, that the dispatch takes over.
"""
