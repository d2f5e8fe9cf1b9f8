-- describe.lua: the current lease of a name, without its owner token.
--
-- KEYS[1]  the lease record of the name (record.lua)
-- KEYS[2]  the places of the name's line (see line.lua)
-- KEYS[3]  the permits of the name, if it is a semaphore
--
-- Returns {1, fence, remaining_ms, holder, granted_at_ms, ttl_ms, lock_delay_ms, waiters, permits}
--         when held,
--         {0, fence, delay_remaining_ms, waiters, permits} when free: fence is the last
--         one Redis remembers (0 if none) and delay_remaining_ms the time
--         left of a lock-delay (0 if none).
--         waiters: callers queued for the name, on every broker, still alive;
--         permits: the semaphore permits held now (0 for a plain lock).
--
-- Uses: constants.lua, record.lua.
local key = KEYS[1]
local now_ms = clock_ms()
local l = read_lease(key, now_ms)
local fence = tonumber(l.f or '0')
local waiters = redis.call('ZCOUNT', KEYS[2], now_ms, '+inf')
local permits = 0
local entries = redis.call('HGETALL', KEYS[3])
for i = 1, #entries, 2 do
  if entries[i] ~= '_f' and entries[i] ~= '_x' and tonumber(string.match(entries[i + 1], '^%d+|(%d+)|')) > now_ms then
    permits = permits + 1
  end
end
if l.o then
  if l.left > 0 then
    return {1, fence, l.left, l.h, tonumber(l.g), tonumber(l.t), tonumber(l.d), waiters, permits}
  end
  return {0, fence, math.max(0, l.left + tonumber(l.d)), waiters, permits}
end
if l.u then
  return {0, fence, math.max(0, tonumber(l.u) - now_ms), waiters, permits}
end
return {0, fence, 0, waiters, permits}
