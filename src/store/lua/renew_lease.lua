-- renew_lease.lua: extend a lease, only for its owner; prepended to
-- renew.lua (one lease), renew_many.lua (a batch), renew_lock.lua and
-- renew_permit.lua (one lease, one key: for a Redis Cluster).
--
-- Defines renew(key, permits, token, new_ttl, now_ms):
--   key      the lease hash of the name
--   permits  the permits of the name, if it is a semaphore (see
--            semaphore_acquire.lua): a token not found in key may be a permit
--   token    owner token
--   new_ttl  new TTL in milliseconds (a string), or '0' to keep the lease's own
--   now_ms   the Redis clock
-- and returns {1, ttl_ms, fence} when renewed,
--             {0, 0, 0} when no lease exists (expired, released, lost),
--             {-1, 0, fence} when another owner holds it (its fence),
--             {-2, 0, fence} when this lease was revoked.
--
-- renew() is renew_lock(), then renew_permit() when renew_lock() finds no
-- lock lease (it returns nil): each touches one key only, so that a Redis
-- Cluster can run them apart while their slot migrates (a script declaring
-- both keys is refused with TRYAGAIN while one exists on a node and the
-- other not).
local function renew_lock(key, token, new_ttl, now_ms)
  local l = redis.call('HMGET', key, 'o', 'f', 't', 'e', 'd', 'r')
  if not l[1] then
    if l[6] == token then
      return {-2, 0, tonumber(l[2])}
    end
    return nil
  end
  if now_ms >= tonumber(l[4]) then
    -- Expired; the key only lives on for its lock-delay.
    return {0, 0, 0}
  end
  if l[1] ~= token then
    return {-1, 0, tonumber(l[2])}
  end
  local ttl = new_ttl
  if ttl == '0' then
    ttl = l[3]
  end
  redis.call('HSET', key, 't', ttl, 'e', string.format('%d', now_ms + tonumber(ttl)))
  redis.call('PEXPIRE', key, tonumber(ttl) + tonumber(l[5] or '0'))
  return {1, tonumber(ttl), tonumber(l[2])}
end

local function renew_permit(permits, token, new_ttl, now_ms)
  local permit = redis.call('HGET', permits, token)
  if permit then
    local fence, expiry, ttl, granted, holder = string.match(permit, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    if tonumber(expiry) > now_ms then
      if new_ttl ~= '0' then
        ttl = new_ttl
      end
      redis.call('HSET', permits, token,
        string.format('%d|%d|%d|%d|', fence, now_ms + tonumber(ttl), ttl, granted) .. holder)
      if redis.call('PTTL', permits) < tonumber(ttl) then
        redis.call('PEXPIRE', permits, ttl)
      end
      return {1, tonumber(ttl), tonumber(fence)}
    end
  end
  return {0, 0, 0}
end

local function renew(key, permits, token, new_ttl, now_ms)
  return renew_lock(key, token, new_ttl, now_ms) or renew_permit(permits, token, new_ttl, now_ms)
end
