-- KEYS: connection hash, the user's provider index. ARGV: account, provider.
local deleted = redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[2]) end
return deleted
