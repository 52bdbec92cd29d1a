local stored
if ARGV[2] == 'NX' then
  stored = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3])
else
  stored = redis.call('SET', KEYS[1], ARGV[1], 'XX', 'KEEPTTL')
end
if not stored then
  return 0
end
if KEYS[2] ~= '' then
  redis.call('SADD', KEYS[2], ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
