-- revoke.lua: end the current lease of a name, whoever holds it (an
-- operator's action). Its holder is told REVOKED at its next renewal; the
-- lease's lock-delay, if any, starts now; waiters are woken.
--
-- KEYS[1]  the lease record of the name (record.lua)
-- ARGV[1]  the name's release channel (the message is empty: the lock is in
--          its lock-delay, if any, so every waiter looks again; see
--          release.lua)
--
-- Returns {REVOKE_DONE, fence} when a lease was revoked,
--         {REVOKE_ALREADY, fence} when the name's last lease was revoked already and
--                    nothing was granted since (a retried Revoke: the work
--                    is done, nothing more to count),
--         {REVOKE_NOTHING, 0} when none was held.
--
-- The record becomes a tombstone: f (the lease's fence), r (the revoked token:
-- a retried Revoke finds it, until the next grant of the name removes it)
-- and u (the end of the lock-delay). It lives until the revoked lease would
-- have expired or the delay ends, whichever is later, plus LINGER_MS
-- (constants.lua); the revocation is also recorded for the revoked token
-- alone for as long (record_end), so that its holder hears REVOKED however
-- many leases of the name come after it.
--
-- Uses: constants.lua, record.lua.
local key = KEYS[1]
local now_ms = clock_ms()
local l = read_lease(key, now_ms, true)
if not l.o then
  if l.r then
    return {REVOKE_ALREADY, tonumber(l.f)}
  end
  return {REVOKE_NOTHING, 0}
end
if l.left <= 0 then
  return {REVOKE_NOTHING, 0}
end
local delay_end = now_ms + tonumber(l.d)
local life = math.max(l.left, tonumber(l.d)) + LINGER_MS
write_lease(key, l, {f = l.f, r = l.o, u = string.format('%d', delay_end)}, life)
record_end(key, l.o, 'r' .. l.f, life)
redis.call('PUBLISH', ARGV[1], '')
return {REVOKE_DONE, tonumber(l.f)}
