-- record.lua: a shared part: the lease record of a lock name (the key
-- {prefix}{name}), read in either of its two formats and written in the
-- one this broker writes (`--redis-record-format`).
--
-- Uses: constants.lua.
-- Defines: RECORD_FORMAT; clock_ms(); read_lease(key, now_ms, brief);
-- write_lease(key, was, l, life_ms); update_lease(key, l, changed,
-- life_ms); and, for those, timed(l) and encode(l).
--
-- A record, as read_lease returns it, is a table of strings (false when
-- absent), never Lua numbers (a fence of 16 digits would print as
-- 1.7e+15): o (owner token), f (fence), h (holder label), t (TTL ms),
-- g (grant time ms), d (lock-delay ms), n ('1': the lease's expiry was
-- reported to somebody already); a tombstone (left by revoke.lua) has no
-- o, but f, r (the revoked token) and u (the end of its lock-delay). And
-- two numbers: left, the milliseconds the lease has left (0 or less: it
-- expired), and now_ms, the Redis clock if it was read (nil if not).
-- format is 1 or 2 (false: no record). Times are by the Redis clock. The
-- key lives until the lease's expiry plus its lock-delay plus LINGER_MS
-- (constants.lua): the delay outlasts the lease, and the holder's late
-- renewal or release still finds its own expired lease.
--
-- Format 1, a hash of those fields and e (the expiry time ms), is what
-- every broker before format 2 wrote and read, and what a broker started
-- with `--redis-record-format 1` still writes: run that while any older
-- broker serves the same Redis (a rolling update), since an older broker
-- cannot read format 2 (its scripts fail with WRONGTYPE on such a name: it
-- answers UNAVAILABLE, and grants no name it cannot read).
--
-- Format 2 is a string, its expiry the key's own TTL:
--   'L' o '|' n d '|' f '|' t '|' g '|' h   a lease (n: '1' or '0'),
--   'R' f '|' u '|' r                       a tombstone;
-- the holder label last, so that it may hold any byte ('|' too); owner
-- tokens are the broker's hex. A lease has left PTTL - d - LINGER_MS: a
-- renewal that keeps the TTL is one PEXPIRE where format 1 takes an HSET
-- and a PEXPIRE; a grant is one SET ... PX where format 1 takes an HSET
-- and a PEXPIRE (and a DEL or HDEL when a record is replaced); a read is a
-- GET and a PTTL, which spares a release the TIME that format 1 needs to
-- tell whether the lease is live (BENCHMARKS.md, "The Redis cycle, record
-- format 2").
--
-- A broker reads both formats: it tries its own first, so a record in its
-- format costs one call and one in the other format two (the first fails
-- with WRONGTYPE, caught). It writes its own format whenever it writes a
-- record, a renewal or a report of the expiry too: after a switch (an
-- update, or a rollback with `--redis-record-format 1`), the live leases
-- are in the new format by their next renewal, and the rest of the records
-- end by themselves within their TTL, lock-delay and LINGER_MS.
local RECORD_FORMAT = __RECORD_FORMAT__

-- The Redis clock, in milliseconds.
local function clock_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A format-1 record l with its time left: its expiry (e) is a time, read
-- against the clock (the caller's now_ms, else the clock read here).
local function timed(l)
  if l.o then
    l.now_ms = l.now_ms or clock_ms()
    l.left = tonumber(l.e) - l.now_ms
  end
  return l
end

-- The record at key. now_ms: the Redis clock if the caller read it, or
-- nil (a format-1 record then reads it: its expiry is a time). brief: the
-- caller neither replies with the holder (h) and grant time (g) nor
-- replaces the record (u, x), so that a broker writing format 1 reads
-- only the other fields of a format-1 record (an HMGET costs Redis about
-- 3.5 thousand instructions a field: a renewal 79 thousand with all 11,
-- measured with `bench/scripts/lua-cost.py`); a broker writing format 2
-- reads them all, since its next write of the record is a whole one.
local function read_lease(key, now_ms, brief)
  local v
  if RECORD_FORMAT == 2 then
    v = redis.pcall('GET', key)
  elseif brief then
    v = redis.pcall('HMGET', key, 'o', 'f', 't', 'e', 'd', 'n', 'r')
    if not v.err then
      -- Format 1, the fields a renewal, a release or a revoke reads.
      return timed({o = v[1], f = v[2], t = v[3], e = v[4], d = v[5] or '0', n = v[6], r = v[7],
        format = v[2] and 1, now_ms = now_ms})
    end
    v = redis.call('GET', key)
  else
    v = redis.pcall('HMGET', key, 'o', 'f', 'h', 'g', 't', 'e', 'd', 'u', 'n', 'r', 'x')
    if v.err then
      v = redis.call('GET', key)
    end
  end
  if type(v) == 'table' and v.err then
    v = redis.call('HMGET', key, 'o', 'f', 'h', 'g', 't', 'e', 'd', 'u', 'n', 'r', 'x')
  end
  if type(v) == 'table' then
    -- Format 1. Every record has a fence (f): without one, no record.
    return timed({o = v[1], f = v[2], h = v[3], g = v[4], t = v[5], e = v[6], d = v[7] or '0',
      u = v[8], n = v[9], r = v[10], x = v[11], format = v[2] and 1, now_ms = now_ms})
  end
  if not v then
    return {format = false, now_ms = now_ms}
  end
  local kind = string.sub(v, 1, 1)
  if kind == 'L' then
    local o, n, d, f, t, g, h = string.match(v, '^L([^|]*)|([01])(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    if o then
      local left = redis.call('PTTL', key) - tonumber(d) - LINGER_MS
      return {o = o, f = f, h = h, g = g, t = t, d = d, n = n == '1' and '1', left = left,
        format = 2, now_ms = now_ms}
    end
  elseif kind == 'R' then
    local f, u, r = string.match(v, '^R(%d+)|(%d+)|(.*)$')
    if f then
      return {o = false, f = f, u = u, r = r, format = 2, now_ms = now_ms}
    end
  end
  -- Neither format: not a record any broker wrote. Failing leaves it as
  -- it is (a grant over it could hide another program's key).
  return error('the key ' .. key .. ' holds no lease record Leasehold knows')
end

local function encode(l)
  if l.o then
    return 'L' .. l.o .. '|' .. (l.n and '1' or '0') .. l.d .. '|' .. l.f .. '|' .. l.t .. '|'
      .. l.g .. '|' .. l.h
  end
  return 'R' .. l.f .. '|' .. l.u .. '|' .. l.r
end

-- Writes the record l (a lease: o, f, h, t, g, d, left, and n if its
-- expiry was reported; or a tombstone: f, r, u; strings but left), the key
-- living life_ms, in RECORD_FORMAT, over was (the record read_lease found
-- at key), whatever its format.
local function write_lease(key, was, l, life_ms)
  if RECORD_FORMAT == 2 then
    redis.call('SET', key, encode(l), 'PX', life_ms)
    return
  end
  if was.format == 2 or (was.format == 1 and not l.o) then
    redis.call('DEL', key)
  elseif was.format == 1 and (was.u or was.n or was.r or was.x) then
    -- Fields of the record replaced that the new one must not keep.
    redis.call('HDEL', key, 'u', 'n', 'r', 'x')
  end
  if l.o then
    local e = string.format('%d', (l.now_ms or clock_ms()) + l.left)
    if l.n then
      redis.call('HSET', key, 'o', l.o, 'f', l.f, 'h', l.h, 't', l.t, 'g', l.g, 'e', e, 'd', l.d, 'n', l.n)
    else
      redis.call('HSET', key, 'o', l.o, 'f', l.f, 'h', l.h, 't', l.t, 'g', l.g, 'e', e, 'd', l.d)
    end
  else
    redis.call('HSET', key, 'f', l.f, 'r', l.r, 'u', l.u)
  end
  redis.call('PEXPIRE', key, life_ms)
end

-- Writes the lease l, as read from key and changed since in what changed
-- names: 'left' (its expiry: a renewal), 'ttl' (its TTL and expiry), 'n'
-- (its expiry reported). life_ms: the key's new life, or nil to keep its expiry. In
-- RECORD_FORMAT: a format-2 record whose expiry alone moves is a PEXPIRE,
-- a format-1 record updated in format 1 an HSET of the fields (and a
-- PEXPIRE), any other a whole record.
local function update_lease(key, l, changed, life_ms)
  if RECORD_FORMAT == 2 then
    if l.format == 2 and changed == 'left' then
      redis.call('PEXPIRE', key, life_ms)
    elseif life_ms then
      redis.call('SET', key, encode(l), 'PX', life_ms)
    else
      redis.call('SET', key, encode(l), 'KEEPTTL')
    end
  elseif l.format == 2 then
    write_lease(key, l, l, life_ms or math.max(1, redis.call('PTTL', key)))
  elseif changed == 'n' then
    redis.call('HSET', key, 'n', l.n)
  else
    l.now_ms = l.now_ms or clock_ms()
    local e = string.format('%d', l.now_ms + l.left)
    if changed == 'left' then
      redis.call('HSET', key, 'e', e)
    else
      redis.call('HSET', key, 't', l.t, 'e', e)
    end
    redis.call('PEXPIRE', key, life_ms)
  end
end
