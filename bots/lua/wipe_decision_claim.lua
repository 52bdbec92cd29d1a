local decided = redis.call('GET', KEYS[1])
if decided then
    return decided
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
