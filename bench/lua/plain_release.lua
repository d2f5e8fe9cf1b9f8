-- plain_release.lua: the hand-written lock's release (compare-and-delete):
-- delete the key only if it still holds the caller's token, so that a
-- holder whose lease expired cannot release its successor's lock.
--
-- KEYS[1]  the lock's key
-- ARGV[1]  the caller's token
--
-- Returns 1 when released, 0 when the key held another token or none.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
