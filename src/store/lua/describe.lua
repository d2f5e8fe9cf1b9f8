-- describe.lua: the current lease of a name, without its owner token.
--
-- KEYS[1]  the lease hash of the name
--
-- Returns {1, fence, remaining_ms, holder, granted_at_ms, ttl_ms} when held,
--         {0} when free.
local key = KEYS[1]
local lease = redis.call('HMGET', key, 'o', 'f', 'h', 'g', 't')
if not lease[1] then
  return {0}
end
return {1, tonumber(lease[2]), redis.call('PTTL', key), lease[3], tonumber(lease[4]), tonumber(lease[5])}
