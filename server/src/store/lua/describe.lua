-- describe.lua: the current lease of a name, without its owner token.
--
-- KEYS[1]  the lease hash of the name
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
local key = KEYS[1]
local l = redis.call('HMGET', key, 'o', 'f', 'h', 'g', 't', 'e', 'd', 'u')
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local fence = tonumber(l[2] or '0')
local waiters = redis.call('ZCOUNT', KEYS[2], now_ms, '+inf')
local permits = 0
local entries = redis.call('HGETALL', KEYS[3])
for i = 1, #entries, 2 do
  if entries[i] ~= '_f' and entries[i] ~= '_x' and tonumber(string.match(entries[i + 1], '^%d+|(%d+)|')) > now_ms then
    permits = permits + 1
  end
end
if l[1] then
  local expiry = tonumber(l[6])
  if now_ms < expiry then
    return {1, fence, expiry - now_ms, l[3], tonumber(l[4]), tonumber(l[5]), tonumber(l[7] or '0'), waiters, permits}
  end
  return {0, fence, math.max(0, expiry + tonumber(l[7] or '0') - now_ms), waiters, permits}
end
if l[8] then
  return {0, fence, math.max(0, tonumber(l[8]) - now_ms), waiters, permits}
end
return {0, fence, 0, waiters, permits}
