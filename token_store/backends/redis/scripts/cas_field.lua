-- KEYS: connection hash. ARGV: account, old value, new value. Replace only what was read.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
