-- acquire.lua: grant the lease on a lock name if nobody holds it.
--
-- KEYS[1]  the lease hash of the name: {prefix}{name}
-- ARGV[1]  owner token of the new lease
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label
-- ARGV[4]  fence floor: the highest fence the calling broker has seen
--
-- Returns {1, fence, ttl_ms, "", granted_at_ms} when granted (also when the
--         lease is already held with this very token: the broker retries a
--         call whose connection broke, and the first try may have run),
--         {0, fence, remaining_ms, holder, granted_at_ms} when someone holds it.
--
-- The lease hash has fields o (owner token), f (fence), h (holder label),
-- t (TTL ms) and g (grant time, ms since the epoch); its key expires with the
-- lease. A hash with only f is a tombstone left by release.lua (see there).
--
-- The fence is max(last fence + 1, server clock in µs, floor + 1): strictly
-- above the name's previous grant while Redis remembers it, and above it by
-- the clock once Redis has forgotten it (expired, released, or data lost).
-- Numbers go back to Redis through string.format('%d'): a plain Lua number
-- would be written as "1.7e+15" and lose digits.
local key = KEYS[1]
local lease = redis.call('HMGET', key, 'o', 'f', 'h', 'g', 't')
if lease[1] then
  if lease[1] == ARGV[1] then
    return {1, tonumber(lease[2]), tonumber(lease[5]), '', tonumber(lease[4])}
  end
  return {0, tonumber(lease[2]), redis.call('PTTL', key), lease[3], tonumber(lease[4])}
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
local last = tonumber(redis.call('HGET', key, 'f') or '0')
local fence = math.max(last + 1, now_us, tonumber(ARGV[4]) + 1)
redis.call('DEL', key)
redis.call('HSET', key,
  'o', ARGV[1],
  'f', string.format('%d', fence),
  'h', ARGV[3],
  't', ARGV[2],
  'g', string.format('%d', now_ms))
redis.call('PEXPIRE', key, ARGV[2])
return {1, fence, tonumber(ARGV[2]), '', now_ms}
