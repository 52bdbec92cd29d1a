local ttl = tonumber(ARGV[1])
local k = 1
for a = 2, #ARGV, 6 do
  local id = ARGV[a]
  redis.call('SET', KEYS[k], ARGV[a + 1], 'EXAT', ARGV[a + 2])
  local last = k + 1
  if ARGV[a + 5] == '1' then last = k + 2 end
  for i = k + 1, last do
    redis.call('ZADD', KEYS[i], ARGV[a + 3], id)
    redis.call('EXPIRE', KEYS[i], ttl)
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[a + 4])
  end
  k = last + 1
end
return 1
