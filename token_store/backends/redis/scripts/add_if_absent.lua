-- KEYS: the record's key. ARGV: its value. Stores the value unless the key exists (no TTL), and
-- returns the value stored now: this one, or the one that was there.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return ARGV[1]
end
return redis.call('GET', KEYS[1])
