-- dequeue.lua: a waiter leaves the line (its wait ran out, its caller went
-- away, its broker shuts down). If it was first in line, the next waiter may
-- now take a free lock: wake it (the message names it, as in release.lua).
-- Uses: line.lua.
--
-- KEYS[1]  the line of the name: {prefix}{name}:line (see line.lua)
-- KEYS[2]  the places of the line: {prefix}{name}:until
-- ARGV[1]  the waiter's token
-- ARGV[2]  the name's release channel
--
-- Returns 1 if the waiter was in line, 0 if not.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local first = first_in_line(KEYS[1], KEYS[2], now_ms)
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed > 0 and first == ARGV[1] then
  local next = first_in_line(KEYS[1], KEYS[2], now_ms)
  redis.call('PUBLISH', ARGV[2], next and string.sub(next, 1, 16) or '')
end
return removed
