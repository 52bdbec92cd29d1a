local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local at = string.find(raw, ', "replay": {', 1, true)
if not at then return raw end
local cut = string.find(raw, ', "turnInput": ', at, true)
if not cut then return raw end
return string.sub(raw, 1, cut - 1) .. '}}'
