local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[10])
local waiter, client_key = ARGV[6], ARGV[7]
local stale_before = tonumber(ARGV[9])
local count = #KEYS - 4

local function next_number()
  local value = redis.call('INCR', KEYS[4])
  redis.call('PEXPIRE', KEYS[4], ttl)
  return value
end

-- Join, or stay: a waiter lost to a FLUSHALL or a prune joins again at its own number.
local arrival = tonumber(ARGV[8])
if arrival == nil then
  arrival = next_number()
elseif tonumber(redis.call('GET', KEYS[4]) or '0') < arrival then
  redis.call('SET', KEYS[4], arrival, 'PX', ttl)
else
  redis.call('PEXPIRE', KEYS[4], ttl)
end
if ARGV[13] == '1' or redis.call('EXISTS', KEYS[3]) == 0 then
  local ids = {}
  for i = 1, count do ids[i] = ARGV[13 + i] end
  redis.call('HSET', KEYS[3], 'key', client_key, 'accounts', ',' .. table.concat(ids, ',') .. ',')
end
redis.call('HSET', KEYS[3], 'seen', now)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('ZADD', KEYS[2], 'NX', arrival, waiter)
redis.call('PEXPIRE', KEYS[2], ttl)
if not redis.call('ZSCORE', KEYS[1], client_key) then
  redis.call('ZADD', KEYS[1], next_number(), client_key)
end
redis.call('PEXPIRE', KEYS[1], ttl)

-- Whose turn it is for a slot on one account: the keys in rotation order, in each the first
-- live waiter that may use the account. Waiters silent since stale_before are pruned.
local function turn_for(account)
  local needle = ',' .. account .. ','
  for _, turn_key in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local queue = ARGV[11] .. turn_key
    local start = 0
    while true do
      local batch = redis.call('ZRANGE', queue, start, start + ${batch_last})
      if #batch == 0 then break end
      local pruned = 0
      for _, candidate in ipairs(batch) do
        local record = redis.call('HMGET', ARGV[12] .. candidate, 'seen', 'accounts')
        if not record[1] or tonumber(record[1]) < stale_before then
          redis.call('ZREM', queue, candidate)
          redis.call('DEL', ARGV[12] .. candidate)
          pruned = pruned + 1
        elseif string.find(record[2], needle, 1, true) then
          return candidate
        end
      end
      start = start + #batch - pruned
    end
    if redis.call('EXISTS', queue) == 0 then redis.call('ZREM', KEYS[1], turn_key) end
  end
  return nil
end

for i = 1, count do
  local slots = KEYS[4 + i]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', '(' .. ARGV[2])
  if redis.call('ZCARD', slots) < tonumber(ARGV[3]) and turn_for(ARGV[13 + i]) == waiter then
    local latest = redis.call('ZREVRANGE', slots, 0, 0, 'WITHSCORES')
    redis.call('ZADD', slots, now, ARGV[4])
    redis.call('PEXPIRE', slots, tonumber(ARGV[5]))
    -- Served: out of the registry, and its key to the end of the rotation.
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[2], waiter)
    if redis.call('EXISTS', KEYS[2]) == 1 then
      redis.call('ZADD', KEYS[1], next_number(), client_key)
    else
      redis.call('ZREM', KEYS[1], client_key)
    end
    if #latest > 0 then return {i, latest[2], arrival, -1} end
    return {i, '-1', arrival, -1}
  end
end
return {0, '-1', arrival, redis.call('ZRANK', KEYS[2], waiter) or -1}
