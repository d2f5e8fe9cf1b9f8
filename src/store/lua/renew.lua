-- renew.lua: extend a lease, only for its owner.
--
-- KEYS[1]  the lease hash of the name
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, or 0 to keep the lease's own TTL
--
-- Returns {1, ttl_ms, fence} when renewed,
--         {0, 0, 0} when no lease exists (expired, released, lost),
--         {-1, 0, fence} when another owner holds it (its fence).
local key = KEYS[1]
local lease = redis.call('HMGET', key, 'o', 'f', 't')
if not lease[1] then
  return {0, 0, 0}
end
if lease[1] ~= ARGV[1] then
  return {-1, 0, tonumber(lease[2])}
end
local ttl = ARGV[2]
if ttl == '0' then
  ttl = lease[3]
else
  redis.call('HSET', key, 't', ttl)
end
redis.call('PEXPIRE', key, ttl)
return {1, tonumber(ttl), tonumber(lease[2])}
