local wait = math.max(redis.call('PTTL', KEYS[3]), redis.call('PTTL', KEYS[4]))
if wait > 0 then
  return wait
end
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') >= tonumber(ARGV[1]) then
    -- the limit is taken by attempts still in flight: wait for them (or the window)
    wait = redis.call('PTTL', KEYS[i])
    if wait < 1 then wait = tonumber(ARGV[3]) end
    return wait
  end
end
for i = 1, 2 do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return 0
