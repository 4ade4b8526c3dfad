-- After stored_value.lua. KEYS: connection hash. ARGV: account, new status (one of
-- ConnectionStatus: [a-z_]). Read-modify-write of the value's "status" member only. The value is
-- edited as text, not re-encoded: Redis's cjson writes numbers with 14 significant digits, which
-- would change the stored times (and so break the updated_at compare-and-set). The text edit is
-- unambiguous: in JSON every '"' inside a string is escaped, so '"status":' can only be the member
-- name. A value without the member gets it appended. Returns 1 when set, 0 when the field is
-- missing or not a connection value.
local cur, data = stored_value()
if not data or type(data.blob) ~= 'string' then return 0 end
local member = '"status":"' .. ARGV[2] .. '"'
local new, n
if data.status == nil then
  new, n = string.gsub(cur, '}%s*$', function() return ',' .. member .. '}' end)
elseif type(data.status) == 'string' then
  new, n = string.gsub(cur, '"status"%s*:%s*"[%w_]*"', function() return member end)
else
  return 0
end
if n ~= 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], new)
return 1
