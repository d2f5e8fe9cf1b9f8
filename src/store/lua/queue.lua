-- queue.lua: the wait queue of a name, prepended to acquire.lua and
-- semaphore_acquire.lua (Redis scripts cannot share code otherwise).
--
-- Expects KEYS[2] (the queue: a list of waiter tokens, in arrival order),
-- KEYS[3] (the waiters' liveness: a sorted set, token -> ms deadline),
-- ARGV[1] (the caller's token), ARGV[7] ('1' if the caller waits) and
-- ARGV[8] (how long a waiter keeps its place without calling again, ms: its
-- broker calls again before that while the waiter lives, so the waiters of a
-- broker that died leave the queue by themselves).
--
-- Defines: queue, alive, token, now_us, now_ms; wait_in_line(); take_turn().
local queue, alive, token = KEYS[2], KEYS[3], ARGV[1]
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)

-- Waiters that stopped calling (their call ended with their broker) leave.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now_ms)) do
  redis.call('LREM', queue, 0, gone)
  redis.call('ZREM', alive, gone)
end

-- Joins the queue (or renews the caller's place) if the caller waits;
-- returns its position (1 = next; 0 = not in the queue).
local function wait_in_line()
  if ARGV[7] ~= '1' then
    return 0
  end
  local life = tonumber(ARGV[8])
  if not redis.call('ZSCORE', alive, token) then
    redis.call('RPUSH', queue, token)
  end
  redis.call('ZADD', alive, now_ms + life, token)
  redis.call('PEXPIRE', queue, life)
  redis.call('PEXPIRE', alive, life)
  return (redis.call('LPOS', queue, token) or -1) + 1
end

-- The name is free: the first in line gets it. Returns the "queued" reply
-- (code 3) if someone else is first; else takes the caller out of the queue
-- (if it was in it) and returns nil.
local function take_turn(fence)
  local first = redis.call('LINDEX', queue, 0)
  if first and first ~= token then
    local first_deadline = tonumber(redis.call('ZSCORE', alive, first) or now_ms)
    -- A place never lasts longer than ARGV[8] from now: longer means the
    -- Redis clock stepped back since it was taken. Counted from now instead,
    -- so that a dead broker's waiter leaves within ARGV[8], not ARGV[8] plus
    -- the step (the first in line is the one that blocks the others).
    local far = now_ms + tonumber(ARGV[8])
    if first_deadline > far then
      first_deadline = far
      redis.call('ZADD', alive, far, first)
    end
    local position = wait_in_line()
    return {3, fence, math.max(1, first_deadline - now_ms), '', 0, position, redis.call('LLEN', queue)}
  end
  if first then
    redis.call('LPOP', queue)
    redis.call('ZREM', alive, token)
  end
  return nil
end

