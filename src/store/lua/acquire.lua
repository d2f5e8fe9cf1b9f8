-- acquire.lua: grant the lease on a lock name if nobody holds it and it is
-- not in its lock-delay.
--
-- KEYS[1]  the lease hash of the name: {prefix}{name}
-- ARGV[1]  owner token of the new lease
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label
-- ARGV[4]  fence floor: the highest fence the calling broker has seen
-- ARGV[5]  lock-delay in milliseconds (0: none): after an involuntary end of
--          this lease (expiry, revoke) nobody gets the lock for that long
-- ARGV[6]  the name's grant channel (observers of an election listen there)
-- ARGV[7]  the lock name (the message published on the channel)
--
-- Returns {1, fence, ttl_ms, "", granted_at_ms} when granted (also when the
--         lease is already held with this very token: the broker retries a
--         call whose connection broke, and the first try may have run),
--         {0, fence, remaining_ms, holder, granted_at_ms} when someone holds it,
--         {2, fence, remaining_ms, holder, granted_at_ms} when it is in its
--         lock-delay (remaining_ms: until the delay ends).
--
-- The lease hash has fields o (owner token), f (fence), h (holder label),
-- t (TTL ms), g (grant time ms), e (expiry time ms) and d (lock-delay ms),
-- all by the Redis clock. The lease ends at e; the key lives until e + d, so
-- that the delay outlasts the lease. A hash without o is a tombstone: left by
-- release.lua (field f only) or revoke.lua (f, r: the revoked token, u: the
-- end of the lock-delay).
--
-- The fence is max(last fence + 1, server clock in µs, floor + 1): strictly
-- above the name's previous grant while Redis remembers it, and above it by
-- the clock once Redis has forgotten it (expired, released, or data lost).
-- Numbers go back to Redis through string.format('%d'): a plain Lua number
-- would be written as "1.7e+15" and lose digits.
local key = KEYS[1]
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
local l = redis.call('HMGET', key, 'o', 'f', 'h', 'g', 't', 'e', 'd', 'u')
if l[1] then
  local expiry = tonumber(l[6])
  if now_ms < expiry then
    if l[1] == ARGV[1] then
      return {1, tonumber(l[2]), tonumber(l[5]), '', tonumber(l[4])}
    end
    return {0, tonumber(l[2]), expiry - now_ms, l[3], tonumber(l[4])}
  end
  local delay_end = expiry + tonumber(l[7] or '0')
  if now_ms < delay_end then
    return {2, tonumber(l[2]), delay_end - now_ms, l[3], tonumber(l[4])}
  end
elseif l[8] and now_ms < tonumber(l[8]) then
  return {2, tonumber(l[2]), tonumber(l[8]) - now_ms, '', 0}
end
local last = tonumber(l[2] or '0')
local fence = math.max(last + 1, now_us, tonumber(ARGV[4]) + 1)
local ttl = tonumber(ARGV[2])
local delay = tonumber(ARGV[5])
redis.call('DEL', key)
redis.call('HSET', key,
  'o', ARGV[1],
  'f', string.format('%d', fence),
  'h', ARGV[3],
  't', ARGV[2],
  'g', string.format('%d', now_ms),
  'e', string.format('%d', now_ms + ttl),
  'd', ARGV[5])
redis.call('PEXPIRE', key, ttl + delay)
redis.call('PUBLISH', ARGV[6], ARGV[7])
return {1, fence, ttl, '', now_ms}
