-- On Redis TIME the call ended by the next whole millisecond: TIME's microseconds floored
-- would count it as ended up to 1 ms before it did, and the next call into the chat could then
-- arrive 999.x ms after this one (Telegram answers that 429).
if ARGV[1] == '' then now = now + 1 end
local window = tonumber(ARGV[3])
local chat_interval = tonumber(ARGV[4])
local group_window = tonumber(ARGV[5])
local weight = tonumber(ARGV[6])
local function ended(key, span)
  if not redis.call('ZSCORE', key, ARGV[2]) then return end
  redis.call('ZADD', key, 'XX', now, ARGV[2])
  for k = 2, weight do redis.call('ZADD', key, 'XX', now, ARGV[2] .. '#' .. k) end
  if redis.call('PTTL', key) < span then
    redis.call('PEXPIRE', key, span)
  end
end
ended(KEYS[1], window)
ended(KEYS[3], group_window)
local chat = redis.call('GET', KEYS[2])
if chat and chat_interval > 0 and string.match(chat, ':(.+)$') == ARGV[2] then
  redis.call('SET', KEYS[2], (now + chat_interval) .. ':' .. ARGV[2], 'PX', chat_interval)
end
return now
