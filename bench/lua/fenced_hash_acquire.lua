-- fenced_hash_acquire.lua: the grant of a reentrant fenced lock made of
-- the Redis calls Redisson's RFencedLock makes, in its order (as its source
-- reads, 2026: a hash per lock holding the holder's re-entry count, a
-- counter per lock for the fence). Written here for the bench, to measure
-- that shape of lock beside the broker's scripts and the plain lock
-- (bench/scripts/lua-cost.py); not Redisson's code.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the lock's fence counter
-- ARGV[1]  lease time in milliseconds
-- ARGV[2]  the holder's id
--
-- Returns {-1, fence} when granted, {remaining ms, -1} when held.
-- Uncontended: EXISTS, INCR, HINCRBY, PEXPIRE.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {-1, fence}
end
return {redis.call('PTTL', KEYS[1]), -1}
