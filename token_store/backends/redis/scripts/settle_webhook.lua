-- KEYS: as enqueue_webhook.lua. ARGV: id, retry time ('' removes the message).
if ARGV[2] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
return 0
