-- renew_many.lua: extend a batch of leases in one script run, each only for
-- its owner. One run per batch instead of one per lease: a heartbeat of 1,000
-- leases costs Redis a fraction of 1,000 EVALSHA (measured in BENCHMARKS.md).
-- Uses: constants.lua, renew_lease.lua (renew()).
--
-- KEYS[2i-1], KEYS[2i]  the lease hash and the permits of lease i
-- ARGV[2i-1], ARGV[2i]  its owner token and new TTL (0: keep its own)
--
-- Returns renew()'s three values per lease, in order, in one flat array
-- {code_1, ttl_1, fence_1, code_2, ...}: no table per lease in Redis, no
-- nested reply for the broker to parse.
--
-- All the keys of a batch must live on one Redis node: fine on one Redis;
-- on a Cluster the broker must batch per slot (names have their own hash
-- tags).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local replies = {}
for i = 1, #KEYS / 2 do
  local code, ttl, fence = renew(KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i], now_ms)
  replies[3 * i - 2], replies[3 * i - 1], replies[3 * i] = code, ttl, fence
end
return replies
