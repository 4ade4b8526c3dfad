-- After remember_deletion.lua. `RedisStore.change_connection`: write what a copy decided
-- (token_store/store_copy.py) only if the connection and the deletion it decided on are still
-- stored as they were read, a compare-and-set over both fields; no rule of the copy is here.
-- KEYS: connection hash, the user's provider index, the user's deletion hash at the provider.
-- ARGV: account, provider, the connection as read and the deletion as read ('' for none), the
-- connection to store ('' for none), '1' to delete the connection, the deletion to remember
-- ('' for none), now, and how long a deletion is kept (seconds, then milliseconds).
-- Returns 1 when written, 0 when either field changed since it was read.
local function as_read(stored, read)
  if read == '' then return stored == false end
  return stored == read
end
-- mutant: redis.copy_compare_and_set
if not as_read(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[3])
  or not as_read(redis.call('HGET', KEYS[3], ARGV[1]), ARGV[4]) then
  return 0
end
if ARGV[6] == '1' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[2]) end
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
  redis.call('SADD', KEYS[2], ARGV[2])
end
if ARGV[7] ~= '' then
  remember_deletion(KEYS[3], ARGV[1], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]))
end
return 1
