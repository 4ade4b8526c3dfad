-- KEYS: elicitation hash. ARGV: connection hash prefix (`{prefix}conn:`). Returns {status, record,
-- the flattened connection hash of the elicitation's user at its provider}, or false when the
-- elicitation is missing. It reads a key it does not declare: a single primary only (on Cluster
-- the store reads the two keys one after the other).
local cur = redis.call('HMGET', KEYS[1], 'status', 'record', 'user')
if not cur[1] or not cur[2] or not cur[3] then return false end
local provider = cjson.decode(cur[2]).provider
return {cur[1], cur[2], redis.call('HGETALL', ARGV[1] .. cur[3] .. ':' .. provider)}
