-- revoke.lua: end the current lease of a name, whoever holds it (an
-- operator's action). Its holder is told REVOKED at its next renewal; the
-- lease's lock-delay, if any, starts now; waiters are woken.
--
-- KEYS[1]  the lease hash of the name
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
-- The key becomes a tombstone: f (the lease's fence), r (the revoked token:
-- a retried Revoke finds it, until the next grant of the name removes it)
-- and u (the end of the lock-delay). It lives until the revoked lease would
-- have expired or the delay ends, whichever is later, plus LINGER_MS
-- (constants.lua); the revocation is also recorded for the revoked token
-- alone for as long (record_end), so that its holder hears REVOKED however
-- many leases of the name come after it.
--
-- Uses: constants.lua.
local key = KEYS[1]
local l = redis.call('HMGET', key, 'o', 'f', 'e', 'd', 'r')
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if not l[1] then
  if l[5] then
    return {REVOKE_ALREADY, tonumber(l[2])}
  end
  return {REVOKE_NOTHING, 0}
end
if now_ms >= tonumber(l[3]) then
  return {REVOKE_NOTHING, 0}
end
local delay_end = now_ms + tonumber(l[4] or '0')
local life = math.max(tonumber(l[3]), delay_end) - now_ms + LINGER_MS
redis.call('DEL', key)
redis.call('HSET', key, 'f', l[2], 'r', l[1], 'u', string.format('%d', delay_end))
redis.call('PEXPIRE', key, life)
record_end(key, l[1], 'r' .. l[2], life)
redis.call('PUBLISH', ARGV[1], '')
return {REVOKE_DONE, tonumber(l[2])}
