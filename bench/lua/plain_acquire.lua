-- plain_acquire.lua: the lock a Redis user writes by hand (the bench's
-- baseline that is not the broker's own scripts): take the key if nobody
-- has it, with a TTL, and count a fence for the holder.
--
-- KEYS[1]  the lock's key
-- KEYS[2]  the lock's fence counter
-- ARGV[1]  the caller's random token
-- ARGV[2]  TTL in milliseconds
--
-- Returns the fence (an integer) when granted, nil when the key is taken.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
