-- A function the connection-value scripts share (loaded before them). KEYS[1]: connection hash,
-- ARGV[1]: account. Returns the stored value and its decoded JSON object, or nothing when the
-- field is missing or not an object.
local function stored_value()
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if not cur then return nil end
  local ok, data = pcall(cjson.decode, cur)
  if not ok or type(data) ~= 'table' then return nil end
  return cur, data
end
