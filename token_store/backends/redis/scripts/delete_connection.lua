-- After remember_deletion.lua. KEYS: connection hash, the user's provider index, the user's
-- deletion hash at the provider. ARGV: account, provider, the deletion's value, now, and how long
-- a deletion is kept (seconds, then milliseconds). Returns 1 when the connection was deleted.
local deleted = redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[2]) end
if deleted == 1 then
  remember_deletion(KEYS[3], ARGV[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))
end
return deleted
