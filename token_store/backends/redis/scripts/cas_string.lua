-- KEYS: state key. ARGV: old value, new value. KEEPTTL: a re-sealed state expires when it would have.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0
