-- KEYS: lock key. ARGV: owner. Compare-and-delete: never someone else's lock after our TTL ran out.
-- mutant: redis.release_lock_owner true
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
