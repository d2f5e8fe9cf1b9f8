-- renew_lease.lua: extend a lease, only for its owner; a shared part
-- (functions only, no KEYS or ARGV) included in renew.lua (one lease),
-- renew_many.lua (a batch), renew_lock.lua and renew_permit.lua (one
-- lease, one key: for a Redis Cluster).
--
-- Uses: constants.lua, record.lua.
-- Defines: renew_lock(key, token, new_ttl, now_ms); renew_permit(permits,
-- token, new_ttl, now_ms); renew(key, permits, token, new_ttl, now_ms).
--
-- renew(key, permits, token, new_ttl, now_ms):
--   key      the lease record of the name (record.lua)
--   permits  the permits of the name, if it is a semaphore (see
--            semaphore_acquire.lua): a token not found in key may be a permit
--   token    owner token
--   new_ttl  new TTL in milliseconds (a string), TTL_KEEP to keep the lease's own,
--            or TTL_LOOK to only look: report as below without extending
--   now_ms   the Redis clock
-- and returns three values (no table: a heartbeat renews hundreds of
-- leases in one run, and a table per lease cost Redis 0.6 µs each,
-- measured); ttl_ms and fence as the strings the record or the caller gave
-- (never through a Lua number, which would print a fence as 1.7e+15):
--             LEASE_DONE, ttl_ms, fence when renewed (or, with TTL_LOOK, alive),
--             LEASE_NOT_HELD, 0, 0 when the store has no record of this token's lease
--                       (never held here, its record lapsed, or the store
--                       lost its data),
--             LEASE_NOT_OWNER, 0, fence when another owner holds it (its fence) and the
--                       store has no record of this token, as a lock or
--                       as a permit,
--             LEASE_REVOKED, 0, fence when this lease was revoked,
--             LEASE_EXPIRED, 0, 0 when this token's lease expired and this is the
--                       first time anyone learns it: the loss to count, once,
--             LEASE_RELEASED, 0, 0 when this token released the lease (a heartbeat
--                       that crossed its release): not a loss,
--             LEASE_EXPIRED_REPORTED, 0, 0 when this token's lease expired and its loss was
--                       reported already (to an earlier request: n in the
--                       lease record; or to the grant that replaced or the
--                       call that dropped it: its end record): not a loss to
--                       count again.
-- See record.lua for the fields of the lease record; LINGER_MS and the end
-- records (a release, a revoke or a reported expiry, per token) are in
-- constants.lua. A live lease renewed by its holder costs no look at end
-- records.
--
-- renew() is renew_lock(), then renew_permit() when renew_lock() finds
-- nothing about the token (it returns nil) or finds the name held as a lock
-- by another token (LEASE_NOT_OWNER): each touches one key only, so that a Redis Cluster
-- can run them apart while their slot migrates (a script declaring both
-- keys is refused with TRYAGAIN while one exists on a node and the other
-- not). A name is a lock or a semaphore at a time, but over time both:
-- a permit of this token that expired (or was released) before the name
-- was granted as a lock is this token's own end, to report as such (LEASE_EXPIRED,
-- LEASE_EXPIRED_REPORTED, LEASE_RELEASED), never as another owner's lease (which a KeepAlive session takes
-- for a store that lost its data); -1 stands only when the permits know
-- nothing of the token either. That look costs a stranger's token an HGET
-- and a GET more; a holder's renewal costs nothing more.
local function renew_lock(key, token, new_ttl, now_ms)
  local l = read_lease(key, now_ms, true)
  local live = l.o and l.left > 0
  if l.o == token then
    if not live then
      if l.n then
        return LEASE_EXPIRED_REPORTED, 0, 0
      end
      l.n = '1'
      update_lease(key, l, 'n')
      return LEASE_EXPIRED, 0, 0
    end
    local ttl = new_ttl
    if tonumber(ttl) == TTL_LOOK then
      return LEASE_DONE, l.t, l.f
    elseif tonumber(ttl) == TTL_KEEP or ttl == l.t then
      l.left = tonumber(l.t)
      update_lease(key, l, 'left', l.left + tonumber(l.d) + LINGER_MS)
      return LEASE_DONE, l.t, l.f
    end
    l.t, l.left = ttl, tonumber(ttl)
    update_lease(key, l, 'ttl', l.left + tonumber(l.d) + LINGER_MS)
    return LEASE_DONE, ttl, l.f
  end
  -- Not the holder: this token's own end, recorded apart (constants.lua).
  local ended = recorded_end(key, token)
  if ended == 'x' then
    return LEASE_RELEASED, 0, 0
  elseif ended and string.sub(ended, 1, 1) == 'e' then
    return LEASE_EXPIRED_REPORTED, 0, 0
  elseif ended then
    return LEASE_REVOKED, 0, string.sub(ended, 2)
  end
  if live then
    return LEASE_NOT_OWNER, 0, l.f
  end
  return nil
end

local function renew_permit(permits, token, new_ttl, now_ms)
  local permit = redis.call('HGET', permits, token)
  if permit then
    local fence, expiry, ttl, granted, holder = string.match(permit, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    if tonumber(expiry) <= now_ms then
      redis.call('HDEL', permits, token)
      record_end(permits, token, 'e' .. fence, LINGER_MS)
      return LEASE_EXPIRED, 0, 0
    end
    if tonumber(new_ttl) == TTL_LOOK then
      return LEASE_DONE, ttl, fence
    elseif tonumber(new_ttl) ~= TTL_KEEP then
      ttl = new_ttl
    end
    redis.call('HSET', permits, token,
      string.format('%d|%d|%d|%d|', fence, now_ms + tonumber(ttl), ttl, granted) .. holder)
    if redis.call('PTTL', permits) < tonumber(ttl) + LINGER_MS then
      redis.call('PEXPIRE', permits, tonumber(ttl) + LINGER_MS)
    end
    return LEASE_DONE, ttl, fence
  end
  local ended = recorded_end(permits, token)
  if ended == 'x' then
    return LEASE_RELEASED, 0, 0
  elseif ended and string.sub(ended, 1, 1) == 'e' then
    return LEASE_EXPIRED_REPORTED, 0, 0
  end
  return LEASE_NOT_HELD, 0, 0
end

local function renew(key, permits, token, new_ttl, now_ms)
  local code, ttl, fence = renew_lock(key, token, new_ttl, now_ms)
  if code == nil then
    return renew_permit(permits, token, new_ttl, now_ms)
  elseif code == LEASE_NOT_OWNER then
    local p_code, p_ttl, p_fence = renew_permit(permits, token, new_ttl, now_ms)
    if p_code ~= LEASE_NOT_HELD then
      return p_code, p_ttl, p_fence
    end
  end
  return code, ttl, fence
end
