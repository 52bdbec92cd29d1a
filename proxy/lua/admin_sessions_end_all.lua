local ended = 0
for _, token_hash in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  ended = ended + redis.call('DEL', ARGV[1] .. token_hash)
end
redis.call('DEL', KEYS[1])
return ended
