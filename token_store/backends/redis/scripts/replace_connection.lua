-- After stored_value.lua. KEYS: connection hash. ARGV: account, expected updated_at, new value.
-- Compare-and-set on the version: replace the field only if its stored updated_at is the expected
-- one. cjson and tonumber both parse the repr-formatted numbers exactly, so equal floats compare equal.
local _, data = stored_value()
if not data or type(data.updated_at) ~= 'number' then return 0 end
if data.updated_at ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
