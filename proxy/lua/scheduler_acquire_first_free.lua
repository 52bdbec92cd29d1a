for position, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[2])
  if redis.call('ZCARD', key) < tonumber(ARGV[3]) then
    local latest = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
    redis.call('ZADD', key, tonumber(ARGV[1]), ARGV[4])
    redis.call('PEXPIRE', key, tonumber(ARGV[5]))
    if #latest > 0 then return {position, latest[2]} end
    return {position, '-1'}
  end
end
return {0, '-1'}
