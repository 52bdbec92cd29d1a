"""The Lua of a key policy's counters (``proxy.policies.counters`` runs them; the keys are in
``proxy.redis_keys``). Each runs as one call, so its checks and writes are atomic across every
process."""

from __future__ import annotations

# KEYS: requests, tokens (current window), in flight, spend day, spend month, cost hint
# ARGV: now_ms, window_ms, rpm, tpm, concurrency, day budget, month budget (-1 = none),
#       admission id, slot ttl ms, tokens window end ms, next day ms, next month ms,
#       the body's estimate (micro-USD), mode, own member ('' = none)
# Modes (one script, so that the three apply the same rules):
#   admit    check everything, then count the request and write its in-flight member;
#   peek     the same checks, no write: would a request be admitted now? ``own`` (a member)
#            is not counted — the caller's running request that this one will follow; a spend
#            not cached passes (the admission computes it);
#   confirm  for a request admitted earlier (member ``own``, before its body was read): its
#            member is refreshed and, with a budget, its reservation raised to the estimate
#            when that is larger — after the budget checks again (the other requests in flight
#            may have reserved the rest meanwhile); refused, the admission is undone (member
#            and window entry), as if it had never counted. ``gone``: the member is no longer
#            there (older than the slot TTL).
# Returns {verdict, retry_after_ms, reserved micro-USD}; verdict: ok | cold | gone |
# day_budget | month_budget | day_reserved | month_reserved | requests | tokens | concurrency.
ADMIT_LUA = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local rpm, tpm, concurrency = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local day_budget, month_budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local id = ARGV[8]
local slot_ttl = tonumber(ARGV[9])
local mode, own = ARGV[14], ARGV[15]
local live_after = '(' .. string.format('%d', now - slot_ttl)
-- A crashed worker's requests (no heartbeat for a slot TTL) hold no slot and no reservation.
if mode ~= 'peek' then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - slot_ttl) end
if mode == 'confirm' and not redis.call('ZSCORE', KEYS[3], own) then
  return {'gone', 0, 0}
end
local function refuse(verdict, retry_after_ms)
  if mode == 'confirm' then
    redis.call('ZREM', KEYS[3], own)
    redis.call('ZREM', KEYS[1], id)
  end
  return {verdict, retry_after_ms, 0}
end
-- The requests in flight but ``own``: how many, and what they reserved.
local others, reserved = 0, 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], live_after, '+inf')) do
  if member ~= own then
    others = others + 1
    reserved = reserved + (tonumber(string.match(member, ':(%d+)$')) or 0)
  end
end
local estimate = 0
if day_budget >= 0 or month_budget >= 0 then
  local day = redis.call('GET', KEYS[4])
  local month = redis.call('GET', KEYS[5])
  local cold = (day_budget >= 0 and not day) or (month_budget >= 0 and not month)
  if cold and mode ~= 'peek' then return {'cold', 0, 0} end
  if not cold then
    day, month = tonumber(day or '0'), tonumber(month or '0')
    if day_budget >= 0 and day >= day_budget then
      return refuse('day_budget', tonumber(ARGV[11]) - now)
    end
    if month_budget >= 0 and month >= month_budget then
      return refuse('month_budget', tonumber(ARGV[12]) - now)
    end
    if day_budget >= 0 and day + reserved >= day_budget then
      return refuse('day_reserved', 1000)
    end
    if month_budget >= 0 and month + reserved >= month_budget then
      return refuse('month_reserved', 1000)
    end
    estimate = math.max(tonumber(ARGV[13]), tonumber(redis.call('GET', KEYS[6]) or '0'))
  end
end
if mode == 'confirm' then
  local held = tonumber(string.match(own, ':(%d+)$')) or 0
  if estimate <= held then
    redis.call('ZADD', KEYS[3], 'XX', now, own)
    redis.call('PEXPIRE', KEYS[3], slot_ttl)
    return {'ok', 0, held}
  end
  redis.call('ZREM', KEYS[3], own)
  redis.call('ZADD', KEYS[3], now, id .. ':' .. string.format('%d', estimate))
  redis.call('PEXPIRE', KEYS[3], slot_ttl)
  return {'ok', 0, estimate}
end
local window_after = '(' .. string.format('%d', now - window)
if mode == 'admit' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window) end
if rpm >= 0 and redis.call('ZCOUNT', KEYS[1], window_after, '+inf') >= rpm then
  local oldest = redis.call(
    'ZRANGEBYSCORE', KEYS[1], window_after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {'requests', tonumber(oldest[2]) + window - now, 0}
end
if tpm >= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= tpm then
  return {'tokens', tonumber(ARGV[10]) - now, 0}
end
if concurrency >= 0 and others >= concurrency then
  return {'concurrency', 1000, 0}
end
if mode == 'peek' then return {'ok', 0, estimate} end
redis.call('ZADD', KEYS[1], now, id)
redis.call('PEXPIRE', KEYS[1], window)
redis.call('ZADD', KEYS[3], now, id .. ':' .. string.format('%d', estimate))
redis.call('PEXPIRE', KEYS[3], slot_ttl)
return {'ok', 0, estimate}
"""

# KEYS: in flight, tokens (window of the end), spend day, spend month, cost hint
# ARGV: in-flight member, tokens, cost micro-USD, tokens key ttl s, cost hint ttl s (0: the
#       key has no budget, no hint is kept)
# The hint follows a new peak at once and decays by an eighth of the gap per cheaper request.
SETTLE_LUA = """
redis.call('ZREM', KEYS[1], ARGV[1])
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
end
local cost = tonumber(ARGV[3])
if cost > 0 then
  for i = 3, 4 do
    if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBY', KEYS[i], cost) end
  end
  if tonumber(ARGV[5]) > 0 then
    local hint = tonumber(redis.call('GET', KEYS[5]) or '0')
    if cost >= hint then hint = cost else hint = hint - math.floor((hint - cost) / 8) end
    redis.call('SET', KEYS[5], string.format('%d', hint), 'EX', tonumber(ARGV[5]))
  end
end
return 1
"""
