-- KEYS: the record's key. ARGV: the value read. Deletes the key only if it still holds that value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
