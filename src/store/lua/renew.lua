-- renew.lua: extend a lease, only for its owner.
--
-- KEYS[1]  the lease hash of the name
-- KEYS[2]  the permits of the name, if it is a semaphore (see
--          semaphore_acquire.lua): a token not found in KEYS[1] may be a permit
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, or 0 to keep the lease's own TTL
--
-- Returns {1, ttl_ms, fence} when renewed,
--         {0, 0, 0} when no lease exists (expired, released, lost),
--         {-1, 0, fence} when another owner holds it (its fence),
--         {-2, 0, fence} when this lease was revoked.
local key = KEYS[1]
local l = redis.call('HMGET', key, 'o', 'f', 't', 'e', 'd', 'r')
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if not l[1] then
  if l[6] == ARGV[1] then
    return {-2, 0, tonumber(l[2])}
  end
  local permit = redis.call('HGET', KEYS[2], ARGV[1])
  if permit then
    local fence, expiry, ttl, granted, holder = string.match(permit, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    if tonumber(expiry) > now_ms then
      if ARGV[2] ~= '0' then
        ttl = ARGV[2]
      end
      redis.call('HSET', KEYS[2], ARGV[1],
        string.format('%d|%d|%d|%d|', fence, now_ms + tonumber(ttl), ttl, granted) .. holder)
      if redis.call('PTTL', KEYS[2]) < tonumber(ttl) then
        redis.call('PEXPIRE', KEYS[2], ttl)
      end
      return {1, tonumber(ttl), tonumber(fence)}
    end
  end
  return {0, 0, 0}
end
if now_ms >= tonumber(l[4]) then
  -- Expired; the key only lives on for its lock-delay.
  return {0, 0, 0}
end
if l[1] ~= ARGV[1] then
  return {-1, 0, tonumber(l[2])}
end
local ttl = ARGV[2]
if ttl == '0' then
  ttl = l[3]
end
redis.call('HSET', key, 't', ttl, 'e', string.format('%d', now_ms + tonumber(ttl)))
redis.call('PEXPIRE', key, tonumber(ttl) + tonumber(l[5] or '0'))
return {1, tonumber(ttl), tonumber(l[2])}
