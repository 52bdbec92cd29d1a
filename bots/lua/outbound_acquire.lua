local per_window = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local spacing = tonumber(ARGV[4])
local chat_interval = tonumber(ARGV[5])
local group_per_window = tonumber(ARGV[6])
local group_window = tonumber(ARGV[7])
local lease = tonumber(ARGV[8])
local id = ARGV[9]
local priority = tonumber(ARGV[10])
local waiter_ms = tonumber(ARGV[11])
local stride = tonumber(ARGV[12])
local counted = ARGV[13] == '1'
local weight = tonumber(ARGV[14])

-- A window holding ``limit`` calls: the wait until ``weight`` more fit, and whether the call
-- that must end first is still in flight.
local function window_wait(key, limit, span)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - span)
  local excess = redis.call('ZCARD', key) + weight - limit
  if excess <= 0 then return 0, false end
  local entry = redis.call('ZRANGE', key, excess - 1, excess - 1, 'WITHSCORES')
  local ends = tonumber(entry[2])
  return ends + span - now, ends > now
end

-- The members a permit of ``weight`` messages takes in a window (an album counts each item).
local function take(key, score, span)
  redis.call('ZADD', key, score, id)
  for k = 2, weight do redis.call('ZADD', key, score, id .. '#' .. k) end
  redis.call('PEXPIRE', key, span + lease)
end

local function higher_waiting(key)
  for p = 0, 2 do
    redis.call('ZREMRANGEBYSCORE', key, p * stride, p * stride + now)
  end
  if priority == 0 then return false end
  return redis.call('ZCOUNT', key, 0, priority * stride - 1) > 0
end

local in_flight = 0
local global_wait = 0
local blocked = tonumber(redis.call('GET', KEYS[3]) or '0')
if blocked > now then global_wait = blocked - now end
if counted then
  local next_start = tonumber(redis.call('GET', KEYS[2]) or '0')
  if next_start > now then global_wait = math.max(global_wait, next_start - now) end
  local wait, held = window_wait(KEYS[1], per_window, window)
  global_wait = math.max(global_wait, wait)
  if held then in_flight = 1 end
end
if higher_waiting(KEYS[4]) then global_wait = math.max(global_wait, math.max(spacing, 10)) end

local chat_wait = 0
local chat_blocked = tonumber(redis.call('GET', KEYS[7]) or '0')
if chat_blocked > now then chat_wait = chat_blocked - now end
if counted then
  if chat_interval > 0 then
    local chat = redis.call('GET', KEYS[5])
    if chat then
      local free_at = tonumber(string.match(chat, '^(%d+)'))
      if free_at > now then chat_wait = math.max(chat_wait, free_at - now) end
      if free_at - chat_interval > now then in_flight = 1 end
    end
  end
  if group_per_window > 0 then
    local wait, held = window_wait(KEYS[6], group_per_window, group_window)
    chat_wait = math.max(chat_wait, wait)
    if held then in_flight = 1 end
  end
end
if higher_waiting(KEYS[8]) then chat_wait = math.max(chat_wait, 10) end

if global_wait > 0 or chat_wait > 0 then
  local score = priority * stride + now + waiter_ms
  if chat_wait > 0 then
    redis.call('ZADD', KEYS[8], score, id)
    redis.call('PEXPIRE', KEYS[8], waiter_ms)
    redis.call('ZREM', KEYS[4], id)
  else
    redis.call('ZADD', KEYS[4], score, id)
    redis.call('PEXPIRE', KEYS[4], waiter_ms)
  end
  return {0, math.max(global_wait, chat_wait), in_flight}
end

redis.call('ZREM', KEYS[4], id)
redis.call('ZREM', KEYS[8], id)
if counted then take(KEYS[1], now + lease, window) end
if counted and spacing > 0 then
  redis.call('SET', KEYS[2], now + spacing, 'PX', spacing)
end
if counted and chat_interval > 0 then
  local held_until = now + lease + chat_interval
  redis.call('SET', KEYS[5], held_until .. ':' .. id, 'PX', lease + chat_interval)
end
if counted and group_per_window > 0 then take(KEYS[6], now + lease, group_window) end
return {1, now}
