local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local rpm, tpm, concurrency = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local day_budget, month_budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local id = ARGV[8]
local slot_ttl = tonumber(ARGV[9])
local mode, own = ARGV[14], ARGV[15]
local models = #ARGV - 16
local live_after = '(' .. string.format('%d', now - slot_ttl)
-- A crashed worker's requests (no heartbeat for a slot TTL) hold no slot and no reservation.
if mode ~= 'peek' then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - slot_ttl) end
if mode == 'confirm' and not redis.call('ZSCORE', KEYS[3], own) then
  return {'gone', 0, 0, 0, {}}
end
local function refuse(verdict, retry_after_ms)
  if mode == 'confirm' then
    redis.call('ZREM', KEYS[3], own)
    redis.call('ZREM', KEYS[1], id)
  end
  return {verdict, retry_after_ms, 0, 0, {}}
end
-- The requests in flight but ``own``: how many, and what they reserved.
local others, reserved = 0, 0
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], live_after, '+inf')) do
  if member ~= own then
    others = others + 1
    reserved = reserved + (tonumber(string.match(member, ':(%d+)$')) or 0)
  end
end
local estimate, key_high, highs = 0, 0, {}
if day_budget >= 0 or month_budget >= 0 then
  local day = redis.call('GET', KEYS[4])
  local month = redis.call('GET', KEYS[5])
  local spend_cold = (day_budget >= 0 and not day) or (month_budget >= 0 and not month)
  local prior = 0
  if mode ~= 'peek' then
    local missing = 0
    if spend_cold then missing = 1 end
    local high = redis.call('GET', KEYS[6])
    if high then key_high = tonumber(high) else missing = missing + 2 end
    local model_missing, model_due = false, false
    for i = 1, models do
      local model_high = redis.call('GET', KEYS[6 + 2 * i - 1])
      if not model_high then
        highs[i] = -1
        model_missing = true
      elseif redis.call('SET', KEYS[6 + 2 * i], '1', 'NX', 'PX', tonumber(ARGV[16])) then
        highs[i] = -2  -- due for its refresh, and this call is the one to do it
        model_due = true
      else
        highs[i] = tonumber(model_high)
        local counted = highs[i]
        if counted <= 0 then counted = tonumber(ARGV[16 + i]) end  -- no history in the pool
        if counted > prior then prior = counted end
      end
    end
    if model_missing then missing = missing + 4 end
    if model_due then missing = missing + 8 end
    if missing > 0 then return {'cold', missing, 0, key_high, highs} end
  end
  if not spend_cold then
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
  end
  estimate = math.max(tonumber(ARGV[13]), key_high, prior)
end
if mode == 'confirm' then
  local held = tonumber(string.match(own, ':(%d+)$')) or 0
  if estimate <= held then
    redis.call('ZADD', KEYS[3], 'XX', now, own)
    redis.call('PEXPIRE', KEYS[3], slot_ttl)
    return {'ok', 0, held, key_high, highs}
  end
  redis.call('ZREM', KEYS[3], own)
  redis.call('ZADD', KEYS[3], now, id .. ':' .. string.format('%d', estimate))
  redis.call('PEXPIRE', KEYS[3], slot_ttl)
  return {'ok', 0, estimate, key_high, highs}
end
local window_after = '(' .. string.format('%d', now - window)
if mode == 'admit' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window) end
if rpm >= 0 and redis.call('ZCOUNT', KEYS[1], window_after, '+inf') >= rpm then
  local oldest = redis.call(
    'ZRANGEBYSCORE', KEYS[1], window_after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {'requests', tonumber(oldest[2]) + window - now, 0, 0, {}}
end
if tpm >= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= tpm then
  return {'tokens', tonumber(ARGV[10]) - now, 0, 0, {}}
end
if concurrency >= 0 and others >= concurrency then
  return {'concurrency', 1000, 0, 0, {}}
end
if mode == 'peek' then return {'ok', 0, estimate, key_high, highs} end
redis.call('ZADD', KEYS[1], now, id)
redis.call('PEXPIRE', KEYS[1], window)
redis.call('ZADD', KEYS[3], now, id .. ':' .. string.format('%d', estimate))
redis.call('PEXPIRE', KEYS[3], slot_ttl)
return {'ok', 0, estimate, key_high, highs}
