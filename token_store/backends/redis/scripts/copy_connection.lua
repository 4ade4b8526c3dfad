-- KEYS: connection hash, the user's provider index. ARGV: account, value, provider.
-- `copy_connections_from`: store the value unless the field holds one at least as new (by
-- updated_at): a connection made or refreshed on the target since is never overwritten.
-- Returns 1 when stored.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ok, old = pcall(cjson.decode, cur)
  local ok_new, new = pcall(cjson.decode, ARGV[2])
  if not ok_new or type(new) ~= 'table' then return 0 end
  if ok and type(old) == 'table' and type(old.updated_at) == 'number'
    and old.updated_at >= new.updated_at then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
