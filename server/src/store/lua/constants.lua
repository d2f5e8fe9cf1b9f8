-- constants.lua: a shared part, included in every script that writes a
-- lease or its records (Redis scripts cannot share code otherwise).
--
-- Uses: none.
-- Defines: the contract's constants (LINGER_MS, the reply codes GRANT_*,
-- LEASE_*, REVOKE_*); end_key(key, token); record_end(key, token, what,
-- life_ms); recorded_end(key, token).
--
-- The constants are declared once, in the broker's Rust code
-- (server/src/store/contract.rs, with what each means), and shared with
-- the PostgreSQL store's functions and the memory store: the placeholder
-- line below (CONSTANTS between double underscores) becomes one
-- `local NAME = value` per constant when the scripts are built, so every
-- script that includes this part reads the same names.
--
-- LINGER_MS: how long a lease's record outlives the lease's end: its
-- expiry (as last granted or renewed, beyond any lock-delay), its release,
-- or its revocation. Within it, the holder's late renewal or release still
-- finds its own lease, so the broker can tell it "expired" and count the
-- loss once (and only then: later requests are told the loss was reported
-- already), a heartbeat that crossed a release is told "released" (not a
-- loss), and a retried release or revoke reports the success of its first
-- try. An expired lease nobody asked about is
-- reported by the next grant of its name, or by the broker that served its
-- ended KeepAlive stream (it looks within a second of the expiry); a
-- holder that asks later than this is told "not held".
__CONSTANTS__

-- The end of a lease by its holder's or an operator's hand (a release, a
-- revoke), and a reported expiry once the lease's own record goes (a grant
-- that replaces an expired lock lease or drops an expired permit, a renewal
-- or release that drops an expired permit), are recorded per owner token,
-- not per name: a name is held by many leases over time (handoffs) and at
-- once (semaphore permits), and each must hear its own end however many
-- came after it. The record is a key of its own
-- beside the structure the lease was in (the lease record for a lock, the
-- permits hash for a permit), in the name's hash tag (so in its Cluster
-- slot): '<key>:end:<token>', holding 'x' (released), 'r<fence>' (revoked)
-- or 'e<fence>' (expired, its loss reported: the holder's next request is
-- told so, not "not held", which a KeepAlive session that renewed the lease
-- for longer than it got could take for a store that lost its data), and
-- expiring by itself LINGER_MS after the end (a revoke's, after the revoked
-- lease would have ended too; an expiry's, after its report). An expiry's
-- record keeps the fence as a revoke's does, so that a broker older than
-- it, which reads every record but 'x' as 'r<fence>', still reads a number.
-- Many ends in a burst cost a key each for LINGER_MS, never a list that
-- grows with the name's history.
local function end_key(key, token)
  return key .. ':end:' .. token
end

local function record_end(key, token, what, life_ms)
  redis.call('SET', end_key(key, token), what, 'PX', life_ms)
end

-- 'x', 'r<fence>', 'e<fence>' or nil (false).
local function recorded_end(key, token)
  return redis.call('GET', end_key(key, token))
end
