-- release.lua: delete a lease, only for its owner, and wake the next waiter.
-- A release is voluntary: it starts no lock-delay.
--
-- KEYS[1]  the lease hash of the name
-- KEYS[2]  the permits of the name, if it is a semaphore: a token not found
--          in KEYS[1] may be a permit
-- KEYS[3]  the wait queue of the name (see acquire.lua)
-- KEYS[4]  the liveness of the queued waiters (see acquire.lua)
-- ARGV[1]  owner token
-- ARGV[2]  the name's release channel
--
-- Returns  1 when released,
--          0 when no lease exists (expired, released, lost),
--         -1 when another owner holds it.
--
-- The message published names the waiter first in line (the first 16 hex
-- digits of its token), so that brokers wake only that one: the queue is
-- FIFO, nobody else could take the lock, and waking every waiter of a busy
-- name would cost a script run each per handoff. Waiters whose place lapsed
-- leave the queue first, so the message names a live one. An empty message
-- (no queue; a semaphore permit, which may serve more than the first) wakes
-- every waiter.
--
-- Normally the key is deleted, so Redis keeps nothing for a free name. Only
-- when the lease's fence is not yet below the server clock (several grants of
-- the name within one microsecond, or a clock that stepped back) does a
-- tombstone keep the fence, just until the clock has passed it: acquire.lua
-- then continues from it, and no later grant can repeat a fence.
local key, queue, alive = KEYS[1], KEYS[3], KEYS[4]
local l = redis.call('HMGET', key, 'o', 'f', 'e')
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)
if not l[1] or now_ms >= tonumber(l[3]) then
  local permit = redis.call('HGET', KEYS[2], ARGV[1])
  if permit and tonumber(string.match(permit, '^%d+|(%d+)|')) > now_ms then
    redis.call('HDEL', KEYS[2], ARGV[1])
    redis.call('PUBLISH', ARGV[2], '')
    return 1
  end
  return 0
end
if l[1] ~= ARGV[1] then
  return -1
end
local fence = tonumber(l[2])
if fence >= now_us then
  redis.call('DEL', key)
  redis.call('HSET', key, 'f', l[2])
  redis.call('PEXPIRE', key, math.floor((fence - now_us) / 1000) + 1)
else
  redis.call('DEL', key)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now_ms)) do
  redis.call('LREM', queue, 0, gone)
  redis.call('ZREM', alive, gone)
end
local next = redis.call('LINDEX', queue, 0)
redis.call('PUBLISH', ARGV[2], next and string.sub(next, 1, 16) or '')
return 1
