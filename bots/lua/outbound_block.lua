local until_ms = now + tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > current then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[2]))
  return until_ms
end
return current
