-- release.lua: delete a lease, only for its owner, and wake the next waiter.
-- A release is voluntary: it starts no lock-delay.
--
-- KEYS[1]  the lease record of the name (record.lua)
-- KEYS[2]  the permits of the name, if it is a semaphore: a token not found
--          in KEYS[1] may be a permit
-- KEYS[3]  the line of the name (see line.lua)
-- KEYS[4]  the places of the line (see line.lua)
-- ARGV[1]  owner token
-- ARGV[2]  the name's release channel
--
-- Returns {LEASE_DONE, 0} when released,
--         {LEASE_RELEASED_ALREADY, 0} when this token released it already (a retried or
--                     second release: the work is done, nothing to count),
--         {LEASE_NOT_HELD, 0} when the store has no record of this token's lease,
--         {LEASE_NOT_OWNER, fence} when another owner holds it, with no record of this
--                     token as a lock or as a permit (a stranger's token, or
--                     one whose record lapsed),
--         {LEASE_REVOKED, fence} when this lease was revoked,
--         {LEASE_EXPIRED, 0} when this token's lease expired and this is the first
--                     time anyone learns it: the loss to count, once (an
--                     expired permit is dropped, and its end recorded for
--                     its token: 'e<fence>', constants.lua),
--         {LEASE_EXPIRED_REPORTED, 0} when this token's lease expired and its loss was
--                     reported already (see renew_lease.lua): nothing to
--                     count.
--
-- The message published names the waiter first in line (the first 16 hex
-- digits of its token), so that brokers wake only that one: the queue is
-- FIFO, nobody else could take the lock, and waking every waiter of a busy
-- name would cost a script run each per handoff. Waiters whose place lapsed
-- leave the queue first, so the message names a live one. An empty message
-- (no queue; a semaphore permit, which may serve more than the first) wakes
-- every waiter.
--
-- The lease record goes at once (nothing in it is of use to anyone once the
-- lease was given back: fences come from the counter, acquire.lua), and
-- the release is recorded for this token alone, for LINGER_MS
-- (constants.lua: record_end), so that a retry reports success and a
-- heartbeat that crossed the release is not taken for a loss, however many
-- leases of the name come and go meanwhile. A released lease costs Redis
-- nothing after that, whatever its TTL was.
--
-- A token that is not the lock's holder is looked up as a permit before
-- it is called another owner's, even while a lock holds the name: a name
-- is a lock or a semaphore at a time, but over time both, and a permit of
-- this token that expired (still in KEYS[2]: dropped and reported here, as
-- renew_lease.lua's renew_permit does), was released or whose expiry was
-- reported before the lock's grant is this token's own end.
--
-- Uses: constants.lua, record.lua, line.lua.
local key, permits, queue, alive, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
-- The clock is read only when needed: a format-2 record tells its time
-- left without it (record.lua).
local l = read_lease(key, nil, true)
local live = l.o and l.left > 0
if l.o == token then
  if not live then
    if l.n then
      return {LEASE_EXPIRED_REPORTED, 0}
    end
    l.n = '1'
    update_lease(key, l, 'n')
    return {LEASE_EXPIRED, 0}
  end
  redis.call('DEL', key)
  record_end(key, token, 'x', LINGER_MS)
  -- No line (the common case): one EXISTS instead of a prune and a look.
  local next
  if redis.call('EXISTS', queue) == 1 then
    local now_ms = l.now_ms or clock_ms()
    prune(queue, alive, now_ms)
    next = first_in_line(queue, alive, now_ms)
  end
  redis.call('PUBLISH', ARGV[2], next and string.sub(next, 1, 16) or '')
  return {LEASE_DONE, 0}
end
-- Not the lock's holder: this token's own end, a permit, or a stranger.
local ended = recorded_end(key, token)
if ended == 'x' then
  return {LEASE_RELEASED_ALREADY, 0}
elseif ended and string.sub(ended, 1, 1) == 'e' then
  return {LEASE_EXPIRED_REPORTED, 0}
elseif ended then
  return {LEASE_REVOKED, tonumber(string.sub(ended, 2))}
end
local permit = redis.call('HGET', permits, token)
if permit then
  local now_ms = l.now_ms or clock_ms()
  redis.call('HDEL', permits, token)
  local fence, expiry = string.match(permit, '^(%d+)|(%d+)|')
  if tonumber(expiry) <= now_ms then
    record_end(permits, token, 'e' .. fence, LINGER_MS)
    return {LEASE_EXPIRED, 0}
  end
  record_end(permits, token, 'x', LINGER_MS)
  -- The last permit gone (only the fence field "_f" left): nothing to keep.
  if redis.call('HLEN', permits) == 1 then
    redis.call('DEL', permits)
  end
  redis.call('PUBLISH', ARGV[2], '')
  return {LEASE_DONE, 0}
end
ended = recorded_end(permits, token)
if ended == 'x' then
  return {LEASE_RELEASED_ALREADY, 0}
elseif ended and string.sub(ended, 1, 1) == 'e' then
  return {LEASE_EXPIRED_REPORTED, 0}
end
-- Unknown as a permit too: a stranger, while a lock holds the name.
if live then
  return {LEASE_NOT_OWNER, tonumber(l.f)}
end
return {LEASE_NOT_HELD, 0}
