-- The webhook outbox. KEYS: the due zset, the messages hash, the attempts hash (`_Keys.webhooks_*`).
-- ARGV: id, message JSON, due time, attempts. An id already queued is left as it is.
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  if tonumber(ARGV[4]) > 0 then redis.call('HSET', KEYS[3], ARGV[1], ARGV[4]) end
end
return 0
