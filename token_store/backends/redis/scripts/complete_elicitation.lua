-- After transition.lua. KEYS[2]: connection hash, KEYS[3]: the user's provider index, KEYS[4]: the
-- live set (Cluster only). ARGV[7]: account, ARGV[8]: provider, ARGV[9]: connection value.
-- The connection is stored whatever the elicitation's status.
-- A stored value for the account keeps its connected_at (`Store.complete_elicitation`): the old
-- number is copied into the new value as text, not through cjson, which writes numbers with 14
-- significant digits and would change the stored time. As in set_connection_status.lua, the text
-- is unambiguous: in JSON every '"' inside a string is escaped, so '"connected_at":' can only be
-- the member name. Only a number as Python's json writes a float ("1795526001.68166", or with an
-- exponent) is copied: an old value without one (edited underneath the store) leaves the new one
-- as is, so a reconnect repairs it rather than carrying a number Python would refuse.
local value = ARGV[9]
local old = redis.call('HGET', KEYS[2], ARGV[7])
if old then
  local kept = string.match(old, '"connected_at":(%-?%d+%.%d+[eE]?[%+%-]?%d*)[,}]')
    or string.match(old, '"connected_at":(%-?%d[eE][%+%-]%d+)[,}]')
  if kept and tonumber(kept) then
    value = string.gsub(value, '"connected_at":[^,}]*', function()
      return '"connected_at":' .. kept
    end, 1)
  end
end
redis.call('HSET', KEYS[2], ARGV[7], value)
redis.call('SADD', KEYS[3], ARGV[8])
return transition(4)
