-- semaphore_acquire.lua: grant one of `limit` permits on a name, if one is
-- free and nobody queued before the caller is still waiting.
--
-- KEYS[1]  the permits of the name (a hash, owner token -> permit):
--          {prefix}{name}:permits; the field "_f" keeps the name's last fence
-- KEYS[2]  the line of the name (as in acquire.lua)
-- KEYS[3]  the places of the line (as in acquire.lua)
-- KEYS[4]  the lease record of the name (record.lua): a name held as a plain lock has no
--          free permit
-- KEYS[5]  the fence counter (as in acquire.lua)
-- ARGV[1]  owner token of the new permit
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label
-- ARGV[4]  fence floor: the highest fence the calling broker has seen
-- ARGV[5]  limit: how many permits may be held at once
-- ARGV[6]  the name's grant channel (the message is empty, as in acquire.lua)
-- ARGV[7]  '1' if the caller waits (joins the queue when not granted)
-- ARGV[8]  how long a queued waiter keeps its place without calling again, ms
--
-- Returns as acquire.lua: {GRANT_GRANTED, fence, ttl_ms, "", granted_at_ms, expired}
-- when granted (or already granted to this token); {GRANT_LOCK_DELAY, fence, remaining_ms,
-- holder, granted_at_ms, position, queued} while the name is in a plain
-- lock's lock-delay; {GRANT_HELD, fence, remaining_ms,
-- holder, granted_at_ms, position, queued, expired} when every permit is
-- held (fence and holder of the permit that expires first, remaining_ms
-- until then); {GRANT_QUEUE, ..., expired} when a permit is free but waiters queued
-- earlier come first. expired: the expired permits dropped here, whose loss
-- nobody had reported (their holders never asked since): reported now, for
-- the broker to count (each leaves an end record 'e<fence>' for its token:
-- constants.lua).
--
-- A permit is "fence|expiry_ms|ttl_ms|granted_ms|holder". An expired permit
-- is dropped by whoever finds it first (here, or its holder's renewal or
-- release, which then report it), so its loss is reported once, and the
-- one that drops it records its end for its token ('e<fence>'), so that
-- the holder's later requests hear that the loss was reported; the key
-- expires with its longest permit plus LINGER_MS (constants.lua), so that a
-- late holder still finds its own. A released permit is recorded per token
-- (constants.lua: end records); "_x" is the last released token as brokers
-- before those records kept it, skipped here. Fences come from the counter, as in acquire.lua: the
-- name's lock and permit grants share one sequence.
--
-- Uses: constants.lua, record.lua, line.lua, queue.lua, fence.lua.
local queue, alive, token = KEYS[2], KEYS[3], ARGV[1]
local waiter, now_us = arrive(queue, alive, token, ARGV[7] == '1', tonumber(ARGV[8]))
local now_ms = waiter.now_ms
local permits, lease, counter = KEYS[1], KEYS[4], KEYS[5]

-- A name held as a plain lock has no permit to give, nor one in its
-- lock-delay (after the lock's expiry, or a revoke): the delay means nobody
-- gets the name, as a lock or as a permit (acquire.lua's rules).
local plain = read_lease(lease, now_ms)
if plain.o then
  if plain.left > 0 then
    local position = wait_in_line(waiter)
    return {GRANT_HELD, tonumber(plain.f), plain.left, plain.h, tonumber(plain.g), position, redis.call('ZCARD', queue)}
  end
  local delay_left = plain.left + tonumber(plain.d)
  if delay_left > 0 then
    local position = wait_in_line(waiter)
    return {GRANT_LOCK_DELAY, tonumber(plain.f), delay_left, plain.h, tonumber(plain.g), position, redis.call('ZCARD', queue)}
  end
elseif plain.u and now_ms < tonumber(plain.u) then
  local position = wait_in_line(waiter)
  return {GRANT_LOCK_DELAY, tonumber(plain.f), tonumber(plain.u) - now_ms, '', 0, position, redis.call('ZCARD', queue)}
end

local last = tonumber(redis.call('HGET', permits, '_f') or '0')
local live, latest, expired = 0, now_ms, 0
local first_expiry, first_fence, first_holder, first_granted
local entries = redis.call('HGETALL', permits)
for i = 1, #entries, 2 do
  local owner, permit = entries[i], entries[i + 1]
  if owner ~= '_f' and owner ~= '_x' then
    local fence, expiry, ttl, granted, holder = string.match(permit, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    expiry = tonumber(expiry)
    -- More than its TTL left: the clock stepped back (see acquire.lua).
    if expiry - now_ms > tonumber(ttl) then
      expiry = now_ms + tonumber(ttl)
      redis.call('HSET', permits, owner, string.format('%d|%d|%d|%d|', fence, expiry, ttl, granted) .. holder)
    end
    if expiry <= now_ms then
      redis.call('HDEL', permits, owner)
      record_end(permits, owner, 'e' .. fence, LINGER_MS)
      expired = expired + 1
    else
      if owner == token then
        return {GRANT_GRANTED, tonumber(fence), tonumber(ttl), '', tonumber(granted), expired}
      end
      live = live + 1
      latest = math.max(latest, expiry)
      if not first_expiry or expiry < first_expiry then
        first_expiry, first_fence, first_holder, first_granted = expiry, tonumber(fence), holder, tonumber(granted)
      end
    end
  end
end

if live >= tonumber(ARGV[5]) then
  local position = wait_in_line(waiter)
  return {GRANT_HELD, first_fence, first_expiry - now_ms, first_holder, first_granted, position, redis.call('ZCARD', queue), expired}
end

local queued = take_turn(waiter, last)
if queued then
  table.insert(queued, expired)
  return queued
end

-- Grant.
local fence, fence_text = next_fence(counter, last, now_us, tonumber(ARGV[4]))
local ttl = tonumber(ARGV[2])
local expiry = now_ms + ttl
redis.call('HSET', permits,
  token, string.format('%d|%d|%d|%d|', fence, expiry, ttl, now_ms) .. ARGV[3],
  '_f', fence_text)
redis.call('PEXPIRE', permits, math.max(latest, expiry) - now_ms + LINGER_MS)
redis.call('PUBLISH', ARGV[6], '')
return {GRANT_GRANTED, fence, ttl, '', now_ms, expired}
