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
  local first = 6
  if ARGV[5] == '1' then first = 5 end
  for i = first, 6 do
    local high = redis.call('GET', KEYS[i])
    if high and cost > tonumber(high) then
      redis.call('SET', KEYS[i], string.format('%d', cost), 'KEEPTTL')
    end
  end
end
return 1
