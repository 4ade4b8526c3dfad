-- After remember_deletion.lua. KEYS: connection hash, the user's provider index, the user's
-- deletion hash at the provider. ARGV: provider, the deletion's value, now, and how long a
-- deletion is kept (seconds, then milliseconds). Returns the deleted hash, flat.
local fields = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
for i = 1, #fields, 2 do
  remember_deletion(KEYS[3], fields[i], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
end
return fields
