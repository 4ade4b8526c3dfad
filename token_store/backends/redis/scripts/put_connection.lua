-- KEYS: connection hash, the user's provider index. ARGV: account, value, provider.
-- A script rather than MULTI/EXEC so that `WAIT` can follow it on the same connection.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
