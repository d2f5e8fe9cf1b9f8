-- fence.lua: the fence of a new grant, a shared part included in every
-- script that grants (acquire.lua, semaphore_acquire.lua); it defines
-- functions only and reads no KEYS or ARGV.
--
-- Uses: none.
-- Defines: next_fence(counter, last, now_us, floor).
--
-- The fence comes from the counter, raised to at least
-- max(last fence of the name + 1, server clock in µs, floor + 1):
-- * while Redis keeps its data the counter alone rises, whatever any clock
--   does (a clock stepped back cannot lower it);
-- * after Redis lost its data (the counter with it), the clock term lands
--   above every earlier fence, since no fence ran ahead of the clock by more
--   than the grants made within one microsecond, and the floor (the highest
--   fence the calling broker has seen) covers a clock that also stepped back;
-- * last + 1 keeps the name's own sequence across an upgrade from brokers
--   that issued fences before the counter existed.
-- Numbers go back to Redis through string.format('%d'): a plain Lua number
-- would be written as "1.7e+15" and lose digits.
--
-- The clock term is above the counter nearly always (the counter was set
-- to the clock at the last grant, and time went on), so the counter is
-- written with the wanted value and read back in the same call (SET ... GET,
-- Redis 6.2): one call per grant. Only when the counter was ahead (grants
-- within one microsecond, a clock stepped back) does a second call raise it
-- to one above what it was.

-- The next fence, and the same as a string (for the lease record):
-- counter is the fence counter's key, last the name's last fence (0 if not
-- known), now_us the server clock in µs, floor the calling broker's floor.
local function next_fence(counter, last, now_us, floor)
  local wanted = math.max(last + 1, now_us, floor + 1)
  local text = string.format('%d', wanted)
  local before = tonumber(redis.call('SET', counter, text, 'GET') or '0')
  if before < wanted then
    return wanted, text
  end
  local fence = before + 1
  text = string.format('%d', fence)
  redis.call('SET', counter, text)
  return fence, text
end
