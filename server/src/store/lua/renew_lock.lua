-- renew_lock.lua: extend one plain lock's lease, only for its owner, with
-- the lease record as the only key (for a Redis Cluster: a one-key script is
-- never refused with TRYAGAIN while its slot migrates; ASK sends it to
-- whichever node has the key).
-- Uses: constants.lua, record.lua, renew_lease.lua (renew_lock()).
--
-- KEYS[1]  the lease record of the name
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, 0 to keep the lease's own TTL, -1 to
--          only look (see renew_lease.lua)
--
-- Returns what renew() returns, as one array {code, ttl_ms, fence}, except
-- {LEASE_NOT_A_LOCK, 0, 0} when the lease record knows
-- nothing of the token: it may be a semaphore permit (renew_permit.lua).
-- {LEASE_NOT_OWNER, 0, fence} (another owner) is said from the lease record alone: the
-- token may still be a permit that ended before the lock's grant, so the
-- caller asks renew_permit.lua then too, and keeps -1 only if that answers
-- 0 (renew() in renew_lease.lua does the same in one script).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local code, ttl, fence = renew_lock(KEYS[1], ARGV[1], ARGV[2], now_ms)
if code == nil then
  return {LEASE_NOT_A_LOCK, 0, 0}
end
return {code, tonumber(ttl), tonumber(fence)}
