-- KEYS: nonce key, slot key. ARGV: expires_at, px, nonce key prefix, the nonce's digest.
-- The nonce the slot held is deleted, so a slot holds one live nonce. On a single primary its key
-- is named from the slot's value, undeclared; on Cluster the caller reads the slot first and passes
-- the digest it read as ARGV[5] and that nonce's key as KEYS[3]: returns 0, changing nothing, when
-- the slot changed meanwhile (the caller reads it again).
local old = redis.call('GET', KEYS[2])
if ARGV[5] then
  if (old or '') ~= ARGV[5] then return 0 end
  -- mutant: redis.nonce_slot_cluster
  if KEYS[3] and old ~= ARGV[4] then redis.call('DEL', KEYS[3]) end
elseif old and old ~= ARGV[4] then
  -- mutant: redis.nonce_slot
  redis.call('DEL', ARGV[3] .. old)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[2])
return 1
