-- KEYS: as enqueue_webhook.lua. ARGV: now, the lease's end, limit. Each due id moves to the
-- lease's end; returns {id, message JSON, attempts} for each. A due id whose message is gone is
-- dropped from the zset. An id under a live lease (its score, the lease's end, is after now) is
-- not due, so never claimed twice.
-- mutant: redis.claim_webhooks_due "ARGV[1], 'LIMIT'" -> "'+inf', 'LIMIT'"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local claimed = {}
for _, id in ipairs(ids) do
  local message = redis.call('HGET', KEYS[2], id)
  if message then
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    claimed[#claimed + 1] = {id, message, tonumber(redis.call('HGET', KEYS[3], id) or '0')}
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return claimed
