local locked = 0
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') >= tonumber(ARGV[1]) then
    redis.call('SET', KEYS[i + 2], '1', 'PX', ARGV[3])
    redis.call('DEL', KEYS[i])
    locked = tonumber(ARGV[3])
  end
end
return locked
