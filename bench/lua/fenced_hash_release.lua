-- fenced_hash_release.lua: the release of the lock of
-- fenced_hash_acquire.lua, made of the Redis calls Redisson's unlock makes,
-- in its order: a record of the request's outcome (read first, so that a
-- retried unlock reports its first try's), the re-entry count taken down,
-- the hash deleted and the release published at zero. Written here for the
-- bench; not Redisson's code.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the lock's release channel
-- KEYS[3]  this unlock request's record
-- ARGV[1]  the message published
-- ARGV[2]  lease time in milliseconds
-- ARGV[3]  the holder's id
-- ARGV[4]  how long the request's record is kept, in milliseconds
--
-- Returns 1 when released, 0 when still held (re-entered), nil when not
-- the holder's. Uncontended: GET, HEXISTS, HINCRBY, DEL, PUBLISH, SET PX.
local recorded = redis.call('GET', KEYS[3])
if recorded then
  return tonumber(recorded)
end
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[4])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
return 1
