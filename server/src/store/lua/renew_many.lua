-- renew_many.lua: extend a batch of leases in one script run, each only for
-- its owner. One run per batch instead of one per lease: a heartbeat of 1,000
-- leases costs Redis a fraction of 1,000 EVALSHA (measured in BENCHMARKS.md).
-- Uses: constants.lua, record.lua, renew_lease.lua (renew()).
--
-- KEYS[2i-1], KEYS[2i]  the lease record and the permits of lease i
-- ARGV[2i-1], ARGV[2i]  its owner token and new TTL (0: keep its own)
--
-- Returns one string: renew()'s three values per lease, in order, as
-- "code ttl_ms fence" joined by commas ("1 5000 1796080931737054,-3 0 0").
-- One value for redis-rs to parse instead of three per lease: parsing a
-- 1,000-lease reply of integers was a quarter of the broker's CPU in a
-- heartbeat benchmark; in Redis the string costs no more than the array.
--
-- All the keys of a batch must live on one Redis node: fine on one Redis;
-- on a Cluster the broker must batch per slot (names have their own hash
-- tags).
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local replies = {}
for i = 1, #KEYS / 2 do
  local code, ttl, fence = renew(KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i], now_ms)
  replies[i] = code .. ' ' .. ttl .. ' ' .. fence
end
return table.concat(replies, ',')
