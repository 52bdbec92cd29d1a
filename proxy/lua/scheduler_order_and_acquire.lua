local strategy = ARGV[1]
local now = tonumber(ARGV[2])
local max_slots = tonumber(ARGV[4])
local load_weight = tonumber(ARGV[7])
local waiting = redis.call('EXISTS', KEYS[#KEYS]) == 1
if redis.call('HGET', KEYS[1], 'strategy') ~= strategy then
  redis.call('HSET', KEYS[1], 'strategy', strategy, 'cursor', 0)
end
local cursor = redis.call('HINCRBY', KEYS[1], 'cursor', 1) - 1
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[9]))
local n = (#ARGV - 13) / 2
local entries = {}
local top = nil
for i = 1, n do
  local key = KEYS[i + 1]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[3])
  local slots = redis.call('ZCARD', key)
  local score = tonumber(ARGV[13 + 2 * i]) + load_weight * (1 - slots / max_slots)
  entries[i] = {index = i, id = ARGV[12 + 2 * i], score = score, slots = slots}
  if top == nil or score > top then top = score end
end
-- The record's own fields come first and its replay node (the client's turns) last: only the
-- part before the node is searched, so a client item carrying the same key is never taken for
-- the record's own (JSON escapes the quotes of string values: the first unescaped marker is
-- the record's).
local function own_fields(raw)
  local at = string.find(raw, ', "replay": ', 1, true)
  if not at then return raw end
  return string.sub(raw, 1, at)
end
local function field_of(raw, marker)
  local at = string.find(raw, marker, 1, true)
  if not at then return nil end
  local from = at + string.len(marker)
  local to = string.find(raw, '"', from, true)
  if not to then return nil end
  return string.sub(raw, from, to - 1)
end
local preferred = ''
if ARGV[10] ~= '' then
  local index_key = KEYS[n + 2]
  local members = redis.call('ZREVRANGE', index_key, 0, tonumber(ARGV[12]) - 1)
  for _, member in ipairs(members) do
    local raw = redis.call('GET', ARGV[10] .. member)
    if not raw then
      redis.call('ZREM', index_key, member)
    else
      local own = own_fields(raw)
      if ARGV[13] ~= '' and field_of(own, '"clientKeyId": "') == ARGV[13]
          and field_of(own, '"variantHash": "') == ARGV[11] then
        preferred = field_of(own, '{"accountId": "') or ''
        break
      end
    end
  end
  if preferred ~= '' then
    for i = 1, n do
      if entries[i].id == preferred then entries[i].score = top + 10 end
    end
  end
end
table.sort(entries, function(a, b)
  if a.score ~= b.score then return a.score > b.score end
  return a.index < b.index
end)
if ARGV[8] == '1' then
  local rotated = {}
  local i = 1
  while i <= n do
    local j = i
    while j < n and entries[j + 1].score == entries[i].score do j = j + 1 end
    local size = j - i + 1
    local shift = cursor % size
    for k = 0, size - 1 do
      rotated[#rotated + 1] = entries[i + ((k + shift) % size)]
    end
    i = j + 1
  end
  entries = rotated
end
local result = {'', '-1', preferred}
for _, entry in ipairs(entries) do
  result[#result + 1] = entry.id
  if result[1] == '' and not waiting and entry.slots < max_slots then
    local key = KEYS[entry.index + 1]
    local latest = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
    if #latest > 0 then result[2] = latest[2] end
    redis.call('ZADD', key, now, ARGV[5])
    redis.call('PEXPIRE', key, tonumber(ARGV[6]))
    result[1] = entry.id
  end
end
return result
