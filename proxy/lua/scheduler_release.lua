redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then redis.call('DEL', KEYS[2], KEYS[3]) end
return 1
