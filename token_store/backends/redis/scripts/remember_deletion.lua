-- A function the scripts that delete connections share (loaded before them): remember that the
-- connection at `account` was deleted, so that a copy between stores never brings it back
-- (token_store/store_copy.py). `gone`: the user's deletion hash at the provider; `value`: JSON
-- with iss, sub and deleted_at, stored as the store wrote it. An entry older than `kept_s`
-- seconds is forgotten, and the hash lives `kept_ms` past its newest deletion.
local function remember_deletion(gone, account, value, now, kept_s, kept_ms)
  local entries = redis.call('HGETALL', gone)
  for i = 1, #entries, 2 do
    local ok, old = pcall(cjson.decode, entries[i + 1])
    if not ok or type(old) ~= 'table' or type(old.deleted_at) ~= 'number'
      or old.deleted_at + kept_s <= now then
      redis.call('HDEL', gone, entries[i])
    end
  end
  -- mutant: redis.remember_deletion
  redis.call('HSET', gone, account, value)
  if redis.call('PTTL', gone) < kept_ms then redis.call('PEXPIRE', gone, kept_ms) end
end
