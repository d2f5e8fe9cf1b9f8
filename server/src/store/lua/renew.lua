-- renew.lua: extend one lease, only for its owner.
-- Uses: constants.lua, record.lua, renew_lease.lua (renew()).
--
-- KEYS[1]  the lease record of the name
-- KEYS[2]  the permits of the name, if it is a semaphore
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds, or 0 to keep the lease's own TTL
--
-- Returns what renew() returns, as one array {code, ttl_ms, fence}.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local code, ttl, fence = renew(KEYS[1], KEYS[2], ARGV[1], ARGV[2], now_ms)
return {code, tonumber(ttl), tonumber(fence)}
