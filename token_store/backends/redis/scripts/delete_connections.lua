-- KEYS: connection hash, the user's provider index. ARGV: provider. Returns the deleted hash, flat.
local fields = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return fields
