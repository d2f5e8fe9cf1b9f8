-- queue.lua: a waiter's place in the line of a name (line.lua). A shared
-- part: it defines functions only and reads no KEYS or ARGV; the script
-- that includes it (acquire.lua, semaphore_acquire.lua) passes its keys and
-- arguments to arrive(), and the waiter it gets back to the other
-- functions. A waiter is a table of:
--   line     the line (a sorted set, token -> arrival sequence)
--   places   the places (a sorted set, token -> ms deadline)
--   token    the caller's token
--   waits    true if the caller waits (joins the line when not granted),
--            false if it tries once
--   life     how long a waiter keeps its place without being refreshed, ms
--            (its broker refreshes it before that while the waiter lives,
--            refresh.lua)
--   now_ms   the Redis clock
--   lined    false if the line was empty on arrival (nothing to prune, and
--            nobody comes first)
--   other    whether the key passed to arrive() as `other` exists: false
--            (it does not), true (it does) or nil (not known: look)
--
-- Uses: constants.lua, line.lua.
-- Defines: arrive(line, places, token, waits, life, other); wait_in_line(waiter);
-- take_turn(waiter, fence).

-- The caller arrives at the line: reads the Redis clock, and waiters that
-- stopped calling (their broker died) leave. Returns the caller as a waiter
-- (above) and the clock in microseconds.
--
-- Most names have no line: one EXISTS of the line and `other` (a key the
-- script must look at anyway, or nil) tells that case apart, and then
-- nothing is pruned and take_turn() reads nothing. Every redis.call costs
-- the script a reply encoded and parsed again (1 to 2 µs, more than most
-- commands themselves): the uncontended path is counted in calls.
local function arrive(line, places, token, waits, life, other)
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local now_ms = math.floor(now_us / 1000)
  local waiter = {line = line, places = places, token = token, waits = waits, life = life,
    now_ms = now_ms, lined = true}
  if redis.call('EXISTS', line, other or line) == 0 then
    waiter.lined, waiter.other = false, false
  elseif other and redis.call('EXISTS', line) == 0 then
    waiter.lined, waiter.other = false, true
  end
  if waiter.lined then
    prune(line, places, now_ms)
  end
  return waiter, now_us
end

-- Joins the line (or renews the caller's place) if the caller waits;
-- returns its position (1 = next; 0 = not in the line). O(log n).
local function wait_in_line(waiter)
  if not waiter.waits then
    return 0
  end
  local queue, alive, token = waiter.line, waiter.places, waiter.token
  if not redis.call('ZSCORE', queue, token) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if last[2] then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, string.format('%d', seq), token)
  end
  redis.call('ZADD', alive, waiter.now_ms + waiter.life, token)
  redis.call('PEXPIRE', queue, waiter.life)
  redis.call('PEXPIRE', alive, waiter.life)
  return redis.call('ZRANK', queue, token) + 1
end

-- The name is free: the first in line gets it. Returns the "queued" reply
-- (GRANT_QUEUE, with `fence`) if someone else is first; else takes the caller
-- out of the line (if it was in it) and returns nil.
local function take_turn(waiter, fence)
  if not waiter.lined then
    return nil
  end
  local queue, alive, token, now_ms = waiter.line, waiter.places, waiter.token, waiter.now_ms
  local first, first_deadline = first_in_line(queue, alive, now_ms)
  if first and first ~= token then
    -- A place never lasts longer than waiter.life from now: longer means
    -- the Redis clock stepped back since it was taken. Counted from now
    -- instead, so that a dead broker's waiter leaves within its life, not
    -- its life plus the step (the first in line is the one that blocks the
    -- others).
    local far = now_ms + waiter.life
    if first_deadline > far then
      first_deadline = far
      redis.call('ZADD', alive, far, first)
    end
    local position = wait_in_line(waiter)
    return {GRANT_QUEUE, fence, math.max(1, first_deadline - now_ms), '', 0, position, redis.call('ZCARD', queue)}
  end
  if first then
    redis.call('ZREM', queue, token)
    redis.call('ZREM', alive, token)
  end
  return nil
end
