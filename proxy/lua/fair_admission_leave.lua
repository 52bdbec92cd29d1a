redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1
