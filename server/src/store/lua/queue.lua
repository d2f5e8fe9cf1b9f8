-- queue.lua: a waiter's place in the line of a name (line.lua), prepended
-- to acquire.lua and semaphore_acquire.lua after line.lua.
--
-- Expects KEYS[2] (the line: token -> arrival sequence), KEYS[3] (the
-- places: token -> ms deadline), ARGV[1] (the caller's token), ARGV[7] ('1'
-- if the caller waits) and ARGV[8] (how long a waiter keeps its place
-- without being refreshed, ms: its broker refreshes it before that while
-- the waiter lives, refresh.lua).
--
-- Defines: queue (the line), alive (the places), token, now_us, now_ms;
-- wait_in_line(); take_turn().
local queue, alive, token = KEYS[2], KEYS[3], ARGV[1]
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now_us / 1000)

-- Waiters that stopped calling (their broker died) leave.
prune(queue, alive, now_ms)

-- Joins the line (or renews the caller's place) if the caller waits;
-- returns its position (1 = next; 0 = not in the line). O(log n).
local function wait_in_line()
  if ARGV[7] ~= '1' then
    return 0
  end
  local life = tonumber(ARGV[8])
  if not redis.call('ZSCORE', queue, token) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if last[2] then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, string.format('%d', seq), token)
  end
  redis.call('ZADD', alive, now_ms + life, token)
  redis.call('PEXPIRE', queue, life)
  redis.call('PEXPIRE', alive, life)
  return redis.call('ZRANK', queue, token) + 1
end

-- The name is free: the first in line gets it. Returns the "queued" reply
-- (code 3) if someone else is first; else takes the caller out of the line
-- (if it was in it) and returns nil.
local function take_turn(fence)
  local first, first_deadline = first_in_line(queue, alive, now_ms)
  if first and first ~= token then
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
    return {3, fence, math.max(1, first_deadline - now_ms), '', 0, position, redis.call('ZCARD', queue)}
  end
  if first then
    redis.call('ZREM', queue, token)
    redis.call('ZREM', alive, token)
  end
  return nil
end
