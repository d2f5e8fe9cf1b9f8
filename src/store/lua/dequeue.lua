-- dequeue.lua: a waiter leaves the queue (its wait ran out, its caller went
-- away, its broker shuts down). If it was first in line, the next waiter may
-- now take a free lock: wake it (the message names it, as in release.lua).
--
-- KEYS[1]  the wait queue of the name: {prefix}{name}:queue
-- KEYS[2]  the liveness of the queued waiters: {prefix}{name}:alive
-- ARGV[1]  the waiter's token
-- ARGV[2]  the name's release channel
--
-- Returns 1 if the waiter was queued, 0 if not.
local first = redis.call('LINDEX', KEYS[1], 0)
local removed = redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed > 0 and first == ARGV[1] then
  local next = redis.call('LINDEX', KEYS[1], 0)
  redis.call('PUBLISH', ARGV[2], next and string.sub(next, 1, 16) or '')
end
return removed
