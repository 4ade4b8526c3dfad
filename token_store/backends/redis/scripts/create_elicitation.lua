-- Count and insert in one script, so concurrent creates cannot both take the last slot.
-- KEYS: elicitation hash, the user's live set.
-- ARGV: now, max_live, expires_at, px, id, status, record, user tag, "1" when the status is live.
-- Returns {1, live} when stored, {0, live} at the limit, {-1, live} when the id already exists.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
local live = redis.call('ZCARD', KEYS[2])
-- mutant: redis.pending_limit
if live >= tonumber(ARGV[2]) then return {0, live} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1, live} end
redis.call('HSET', KEYS[1], 'status', ARGV[6], 'record', ARGV[7], 'user', ARGV[8], 'expires_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[9] == '1' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
end
return {1, live}
