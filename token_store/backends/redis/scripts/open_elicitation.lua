-- After transition.lua. KEYS[2]: state key, KEYS[3]: the live set (Cluster only). ARGV[7]: sealed
-- state, ARGV[8]: its TTL in ms. The state is checked first (a script is not rolled back), and
-- stored only when this call opened the elicitation.
-- Returns {1, record} when opened, {0} when the elicitation was not pending, {-1} when the state exists.
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end
local record = transition(3)
if not record then return {0} end
-- mutant: redis.open_elicitation_single_use swap-up
redis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[8])
return {1, record}
