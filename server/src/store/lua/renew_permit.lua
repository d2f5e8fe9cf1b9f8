-- renew_permit.lua: extend one semaphore permit, only for its owner, with
-- the permits hash as the only key (after renew_lock.lua found no lock
-- lease of the token: none at all, or another token's; for a Redis
-- Cluster, as renew_lock.lua).
-- Uses: constants.lua, record.lua, renew_lease.lua (renew_permit()).
--
-- KEYS[1]  the permits of the name
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, 0 to keep the permit's own TTL, -1 to
--          only look (see renew_lease.lua)
--
-- Returns what renew_permit() returns (see renew_lease.lua), as one array
-- {code, ttl_ms, fence}.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local code, ttl, fence = renew_permit(KEYS[1], ARGV[1], ARGV[2], now_ms)
return {code, tonumber(ttl), tonumber(fence)}
