-- release.lua: delete a lease, only for its owner, and wake its waiters. A
-- release is voluntary: it starts no lock-delay.
--
-- KEYS[1]  the lease hash of the name
-- KEYS[2]  the permits of the name, if it is a semaphore: a token not found
--          in KEYS[1] may be a permit
-- ARGV[1]  owner token
-- ARGV[2]  the name's release channel
-- ARGV[3]  the lock name (the message published on the channel)
--
-- Returns  1 when released,
--          0 when no lease exists (expired, released, lost),
--         -1 when another owner holds it.
--
-- Normally the key is deleted, so Redis keeps nothing for a free name. Only
-- when the lease's fence is not yet below the server clock (several grants of
-- the name within one microsecond, or a clock that stepped back) does a
-- tombstone keep the fence, just until the clock has passed it: acquire.lua
-- then continues from it, and no later grant can repeat a fence.
local key = KEYS[1]
local l = redis.call('HMGET', key, 'o', 'f', 'e')
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
if not l[1] or math.floor(now_us / 1000) >= tonumber(l[3]) then
  local permit = redis.call('HGET', KEYS[2], ARGV[1])
  if permit and tonumber(string.match(permit, '^%d+|(%d+)|')) > math.floor(now_us / 1000) then
    redis.call('HDEL', KEYS[2], ARGV[1])
    redis.call('PUBLISH', ARGV[2], ARGV[3])
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
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
