-- line.lua: the wait line of a name, a shared part included in every
-- script that reads or changes it (Redis scripts cannot share code
-- otherwise); it defines functions only and reads no KEYS or ARGV. No
-- call here costs more than O(log n) in the line's length n, or
-- O(PRUNE log n).
--
-- A line is two sorted sets, in the name's hash tag (one Cluster slot):
-- * the line, {prefix}{name}:line: token -> arrival sequence. A waiter
--   joins one above the highest sequence in the line (it starts at 1 when
--   the line is empty), so the order is the arrival order across every
--   broker replica; its place is its rank (ZRANK);
-- * the places, {prefix}{name}:until: token -> the Redis time (ms) by which
--   the waiter must have called again, or lose its place. Its broker
--   refreshes it every second while the waiter lives (refresh.lua), so the
--   waiters of a broker that died leave the line by themselves.
-- A token in the line without a deadline (there is none, short of a bug)
-- counts as lapsed.
--
-- Broker versions before these keys kept a list (:queue) and the
-- deadlines in :alive; the two never touch each other's keys.
--
-- Uses: none.
-- Defines: PRUNE; prune(line, places, now_ms); first_in_line(line, places,
-- now_ms).

-- At most this many lapsed places leave per script run, the longest lapsed
-- first, so that no run is O(n) when a broker with thousands of waiters
-- dies: the rest leave with the next runs (every waiter's broker runs one
-- a second).
local PRUNE = 100

-- Lapsed places leave the line (at most PRUNE of them).
local function prune(line, places, now_ms)
  local gone = redis.call('ZRANGEBYSCORE', places, '-inf', now_ms, 'LIMIT', 0, PRUNE)
  if #gone > 0 then
    redis.call('ZREM', line, unpack(gone))
    redis.call('ZREM', places, unpack(gone))
  end
end

-- The first live waiter in line and its deadline, or nil. Lapsed places
-- found first leave (at most PRUNE of them: past that, the first found so
-- far is named, lapsed or not: a later run goes on).
local function first_in_line(line, places, now_ms)
  for _ = 1, PRUNE do
    local first = redis.call('ZRANGE', line, 0, 0)[1]
    if not first then
      return nil
    end
    local deadline = tonumber(redis.call('ZSCORE', places, first) or '0')
    if deadline > now_ms then
      return first, deadline
    end
    redis.call('ZREM', line, first)
    redis.call('ZREM', places, first)
  end
  return redis.call('ZRANGE', line, 0, 0)[1], now_ms
end
