-- The status compare-and-set, a function the elicitation scripts share (loaded before them).
-- KEYS[1]: elicitation hash. ARGV[1..6]: expected, new, now, "1" when `new` is live, live-set key
-- prefix, id. `live_key`: the index in KEYS where a caller on Cluster declares the live set.
-- The live set's name comes from the record (the caller knows only the id). On a single primary
-- (with or without Sentinel) the script names it without declaring it; on Cluster the caller reads
-- the record's user first and declares the live set as KEYS[live_key], which must be the
-- record's, or nothing changes.
-- Returns the stored record JSON, or false when the record is missing, expired or not in `expected`.
local function transition(live_key)
  local cur = redis.call('HMGET', KEYS[1], 'status', 'expires_at', 'user', 'record')
  -- mutant: redis.transition_cas "cur[1] ~= ARGV[1] or " -> ""
  if cur[1] ~= ARGV[1] or not cur[2] or tonumber(cur[2]) <= tonumber(ARGV[3]) then return false end
  local live_set = ARGV[5] .. cur[3]
  if KEYS[live_key] and KEYS[live_key] ~= live_set then return false end
  redis.call('HSET', KEYS[1], 'status', ARGV[2])
  if ARGV[4] == '1' then
    redis.call('ZADD', live_set, cur[2], ARGV[6])
    local ttl = redis.call('PTTL', KEYS[1])
    local set_ttl = redis.call('PTTL', live_set)
    if ttl > 0 and set_ttl < ttl then redis.call('PEXPIRE', live_set, ttl) end
  else
    redis.call('ZREM', live_set, ARGV[6])
  end
  return cur[4]
end
