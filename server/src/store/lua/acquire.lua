-- acquire.lua: grant the lease on a lock name if nobody holds it, it is not
-- in its lock-delay, and nobody queued before the caller is still waiting.
--
-- KEYS[1]  the lease record of the name (record.lua): {prefix}{name}
-- KEYS[2]  the line of the name (a sorted set, token -> arrival sequence):
--          {prefix}{name}:line (see line.lua)
-- KEYS[3]  the places of the line (a sorted set, token -> ms deadline):
--          {prefix}{name}:until
-- KEYS[4]  the permits of the name (semaphore_acquire.lua): while any is
--          held, the name cannot be granted as a plain lock
-- KEYS[5]  the fence counter: one key for a Redis server, one per hash slot
--          on a Cluster (its hash tag maps to the name's slot)
-- ARGV[1]  owner token of the new lease
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label
-- ARGV[4]  fence floor: the highest fence the calling broker has seen
-- ARGV[5]  lock-delay in milliseconds (0: none): after an involuntary end of
--          this lease (expiry, revoke) nobody gets the lock for that long
-- ARGV[6]  the name's grant channel (observers of an election listen there;
--          the message is empty: it names no waiter, see release.lua)
-- ARGV[7]  '1' if the caller waits (then it joins the queue, or refreshes its
--          place, when not granted), '0' if it tries once
-- ARGV[8]  how long a queued waiter keeps its place (see queue.lua)
--
-- Returns {GRANT_GRANTED, fence, ttl_ms, "", granted_at_ms, expired} when granted (also
--         when the lease is already held with this very token: the broker
--         retries a call whose connection broke, and the first try may have
--         run); expired counts the expired leases of the name whose loss
--         nobody had reported (their holders never asked since) that the
--         grant found: the lock lease it replaced (1 or 0), plus the
--         expired semaphore permits still in KEYS[4], which it drops (a name
--         held as permits that all expired is free for a lock); the one
--         report of those losses, for the broker to count (each expired
--         lease replaced or dropped, reported now or before, leaves an end
--         record 'e<fence>' for its token: constants.lua, as
--         semaphore_acquire.lua records the permits it drops),
--         {GRANT_HELD, fence, remaining_ms, holder, granted_at_ms, position, queued}
--         when someone holds it,
--         {GRANT_LOCK_DELAY, fence, remaining_ms, holder, granted_at_ms, position, queued}
--         when it is in its lock-delay (remaining_ms: until the delay ends),
--         {GRANT_QUEUE, fence, remaining_ms, "", 0, position, queued} when it is free
--         but waiters queued earlier come first (remaining_ms: until the
--         first of them must have called again, or left the queue).
--         position: the caller's place in the queue (1 = next; 0 = not in
--         it); queued: the queue's length.
--
-- The lease record (record.lua: its fields and formats) ends at e; the
-- key lives until e plus its lock-delay plus LINGER_MS (constants.lua), so
-- that the delay outlasts the lease and the holder's late renewal or
-- release still finds its own expired lease: a loss is reported once, to
-- whoever learns it first (the holder, the broker of its broken stream, or
-- the next grant), and field n marks it reported. A record without o is a
-- tombstone, left by revoke.lua; a release deletes the record. Releases
-- and revocations are recorded per token apart from it (constants.lua: end
-- records), so a grant has nothing to carry over; what it does record is
-- the end of the expired lease it replaces ('e<fence>'), whose holder would
-- otherwise find no trace of its token and be told "not held" instead of
-- "expired, reported already".
--
-- The fence comes from the counter, raised past the name's last fence, the
-- clock and the broker's floor (fence.lua).
--
-- The uncontended grant (a free name, no line, no permits) costs six
-- redis.call in format 2: GET, TIME, EXISTS (line and permits in one),
-- SET ... GET (the fence), SET ... PX (the record), PUBLISH; format 1
-- takes an HMGET for the GET, and an HSET and a PEXPIRE for the record's
-- SET (and an HDEL when the record replaced has fields the new one must
-- not keep). Replacing an expired lease costs one SET more (its end
-- record); dropping expired permits one DEL, and a SET each.
--
-- Uses: constants.lua, record.lua, line.lua, queue.lua, fence.lua.
local queue, alive, token = KEYS[2], KEYS[3], ARGV[1]
local key, permits, counter = KEYS[1], KEYS[4], KEYS[5]
local waiter, now_us = arrive(queue, alive, token, ARGV[7] == '1', tonumber(ARGV[8]), permits)
local now_ms = waiter.now_ms

local l = read_lease(key, now_ms)
if l.o then
  -- A lease never has more than its TTL left: more means the Redis clock
  -- stepped back since it was written. Count its TTL from now instead, so
  -- that a dead holder's lease ends within its TTL, not the TTL plus the
  -- step (its holder's own deadline, counted on its monotonic clock, is
  -- earlier still).
  if l.left > tonumber(l.t) then
    l.left = tonumber(l.t)
    update_lease(key, l, 'left', l.left + tonumber(l.d) + LINGER_MS)
  end
  if l.left > 0 then
    if l.o == token then
      return {GRANT_GRANTED, tonumber(l.f), tonumber(l.t), '', tonumber(l.g), 0}
    end
    local position = wait_in_line(waiter)
    return {GRANT_HELD, tonumber(l.f), l.left, l.h, tonumber(l.g), position, redis.call('ZCARD', queue)}
  end
  local delay_left = l.left + tonumber(l.d)
  if delay_left > 0 then
    local position = wait_in_line(waiter)
    return {GRANT_LOCK_DELAY, tonumber(l.f), delay_left, l.h, tonumber(l.g), position, redis.call('ZCARD', queue)}
  end
elseif l.u and now_ms < tonumber(l.u) then
  local position = wait_in_line(waiter)
  return {GRANT_LOCK_DELAY, tonumber(l.f), tonumber(l.u) - now_ms, '', 0, position, redis.call('ZCARD', queue)}
end

-- Held as a semaphore: blocked until its permits are gone.
local has_permits = waiter.other
if has_permits == nil then
  has_permits = redis.call('EXISTS', permits) == 1
end
-- Expired permits found here, {token, fence} each: dropped by the grant.
local stale = {}
if has_permits then
  local entries = redis.call('HGETALL', permits)
  local first_expiry
  for i = 1, #entries, 2 do
    if entries[i] ~= '_f' and entries[i] ~= '_x' then
      local fence, expiry = string.match(entries[i + 1], '^(%d+)|(%d+)|')
      expiry = tonumber(expiry)
      if expiry > now_ms then
        if not first_expiry or expiry < first_expiry then
          first_expiry = expiry
        end
      else
        stale[#stale + 1] = {entries[i], fence}
      end
    end
  end
  if first_expiry then
    local position = wait_in_line(waiter)
    return {GRANT_HELD, tonumber(l.f or '0'), first_expiry - now_ms, '(semaphore permits)', 0, position, redis.call('ZCARD', queue)}
  end
end

-- Free: the first in line gets it.
local queued = take_turn(waiter, tonumber(l.f or '0'))
if queued then
  return queued
end
local last = tonumber(l.f or '0')
-- Grant.
local fence, fence_text = next_fence(counter, last, now_us, tonumber(ARGV[4]))
-- An expired lease replaced here: its loss is reported now (unless its
-- holder heard it already: n), and recorded for its token, which the new
-- lease no longer names.
local expired = 0
if l.o and l.o ~= token then
  if not l.n then
    expired = 1
  end
  record_end(key, l.o, 'e' .. l.f, LINGER_MS)
end
-- Expired permits (none is live, or the name would not be free): dropped,
-- reported now and recorded for their tokens, as semaphore_acquire.lua
-- does, so that their holders hear "expired" once, then "reported
-- already", never another owner's lock. No permit is left: the hash goes.
if #stale > 0 then
  for _, p in ipairs(stale) do
    record_end(permits, p[1], 'e' .. p[2], LINGER_MS)
  end
  redis.call('DEL', permits)
  expired = expired + #stale
end
local ttl = tonumber(ARGV[2])
write_lease(key, l, {o = token, f = fence_text, h = ARGV[3], t = ARGV[2],
  g = string.format('%d', now_ms), d = ARGV[5], left = ttl, now_ms = now_ms},
  ttl + tonumber(ARGV[5]) + LINGER_MS)
redis.call('PUBLISH', ARGV[6], '')
return {GRANT_GRANTED, fence, ttl, '', now_ms, expired}
