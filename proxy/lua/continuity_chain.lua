local marker = ', "replay": {"parentResponseId": "'
local result = {}
local key = KEYS[1]
local id = string.sub(key, string.len(ARGV[1]) + 1)
for _ = 1, tonumber(ARGV[2]) do
  local raw = redis.call('GET', key)
  if not raw then break end
  result[#result + 1] = id
  result[#result + 1] = raw
  local at = string.find(raw, marker, 1, true)
  if not at then break end
  local from = at + string.len(marker)
  local to = string.find(raw, '"', from, true)
  if not to then break end
  id = string.sub(raw, from, to - 1)
  key = ARGV[1] .. id
end
return result
