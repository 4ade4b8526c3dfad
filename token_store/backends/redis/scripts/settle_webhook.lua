-- KEYS: as enqueue_webhook.lua. ARGV: id, the end of the claimer's lease, retry time ('' removes
-- the message). Only under the claimer's own lease (the id's score is still that lease's end):
-- a message claimed again after the lease ended is the new claimer's. Returns 1 when settled.
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
-- mutant: redis.settle_webhook_own_lease "tonumber(due) ~= tonumber(ARGV[2])" -> "false"
if not due or tonumber(due) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
else
  return 0
end
return 1
