"""The Lua of a key policy's counters (``proxy.policies.counters`` runs them; the keys are in
``proxy.redis_keys``). Each runs as one call, so its checks and writes are atomic across every
process."""

from __future__ import annotations

from common.redis_scripts import lua_script

# KEYS: requests, tokens (current window), in flight, spend day, spend month, the key's cost
#       high-water (its budget window), then per candidate model its cost high-water in the
#       pool and its refresh claim
# ARGV: now_ms, window_ms, rpm, tpm, concurrency, day budget, month budget (-1 = none),
#       admission id, slot ttl ms, tokens window end ms, next day ms, next month ms,
#       the request's own estimate (its body's input; 0 before the body), mode, own member
#       ('' = none), the models' refresh period ms, then per candidate model the prior that
#       stands for it when the pool has no history of it (micro-USD)
# (so candidate ``i``, from 1, has its high-water at KEYS[6 + 2i - 1], its refresh claim at
# KEYS[6 + 2i] and its default at ARGV[16 + i])
# Candidate models: the request's model once its body is known; before it, the key's allowed
# models (none for a key allowed every model: the dispatch adds the model's prior).
# With a budget the reservation is the largest of the own estimate, the key's high-water and
# each candidate's prior (its high-water, or its default when that is 0).
# Modes (one script, so that the three apply the same rules):
#   admit    check everything, then count the request and write its in-flight member;
#   peek     the same checks, no write: would a request be admitted now? ``own`` (a member)
#            is not counted — the caller's running request that this one will follow; a spend
#            not cached passes (the admission computes it); no high-water is read;
#   confirm  for a request admitted earlier (member ``own``, before its body was read): its
#            member is refreshed and, with a budget, its reservation raised to the estimate
#            when that is larger — after the budget checks again (the other requests in flight
#            may have reserved the rest meanwhile); refused, the admission is undone (member
#            and window entry), as if it had never counted. ``gone``: the member is no longer
#            there (older than the slot TTL).
# Returns {verdict, second, reserved micro-USD, the key's high-water, {each candidate's
# high-water as read}}; verdict: ok | cold | gone | day_budget | month_budget | day_reserved |
# month_reserved | requests | tokens | concurrency. ``second``: a refusal's retry-after ms;
# ``cold`` (with a budget, admit and confirm: a spend or a high-water is not cached, or a
# model's is due for its refresh and this call claimed it — nothing else was written), what is
# missing: 1 a spend, 2 the key's high-water, 4 a model's, 8 a model's due; a candidate's
# high-water is then -1 when missing, -2 when due.
ADMIT_LUA = lua_script("proxy", "key_policy_admit")

# KEYS: in flight, tokens (window of the end), spend day, spend month, the key's cost
#       high-water, the model's cost high-water in the pool
# ARGV: in-flight member, tokens, cost micro-USD, tokens key ttl s, 1 when the key has a budget
# The high-waters are raised to a dearer cost, never lowered, and only where they exist (a
# missing one is seeded from the usage rows, which hold this request's row by then).
SETTLE_LUA = lua_script("proxy", "key_policy_settle")
