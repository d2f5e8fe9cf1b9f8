-- schema.sql: the PostgreSQL store's tables and functions, version 5.
--
-- Run whole, in one transaction, by the broker at start-up (when the
-- version table says the schema is older) or by `leasehold migrate`.
-- __SCHEMA__ stands for the store's schema (derived from --key-prefix, a
-- validated identifier); the broker substitutes it. The other placeholders
-- (a name between double underscores: LINGER_MS, the reply codes GRANT_*,
-- LEASE_*, REVOKE_*) are the contract's constants, declared once in the broker's Rust code
-- (server/src/store/contract.rs, with what each means) and filled in with
-- their values before the text is run, as in the Lua scripts. Every statement is
-- idempotent (IF NOT EXISTS, CREATE OR REPLACE), so a second run changes
-- nothing.
--
-- Each store operation is ONE statement calling one function below, so it
-- runs in one short transaction. The functions are the Redis store's Lua
-- scripts (server/src/store/lua/*.lua) in PL/pgSQL, field for field: same
-- replies, same codes, same LINGER record, same fences; read those headers
-- for the why. What differs:
-- * Serialisation per name: every function that reads and then writes a
--   name first takes pg_advisory_xact_lock on a 64-bit hash of the schema
--   and the name (held to commit), so two grants of one name never both
--   see it free. Functions touching several names (renew_many) lock them in
--   ascending key order, so that two batches cannot deadlock.
-- * Helpers that read or write a table are PL/pgSQL, not LANGUAGE sql:
--   PostgreSQL plans a non-inlined SQL function's body on every call,
--   PL/pgSQL keeps its plans for the session (track_functions showed the
--   SQL helpers at several times the cost; BENCHMARKS.md has the figures).
--   One-expression helpers (now_us, name_key, lock_name, notify) stay
--   SQL: those are inlined into their caller's expression.
-- * Time: clock_timestamp() of the database server, read once per call,
--   in ms (and µs for fences), never the broker's clock.
-- * Fences: one counter row (fence_counter, written in the grant's
--   transaction, so as durable as the grant), advanced to at least
--   max(counter + 1, last fence of the name + 1, clock in µs, floor + 1)
--   as the Redis scripts advance their counter.
-- * Expiry: a row is absent once its forget_ms (the Redis key's expiry) has
--   passed, whether or not sweep() has deleted it yet; writes are upserts,
--   so a row deleted under a call is simply written again.
-- * Wake-ups: pg_notify on the channel named by the schema, delivered at
--   commit, with the payload '<r|g>:<first 16 hex digits of the waiter
--   first in line, or empty>:<name>' (release.lua's message, plus the
--   event and the name, since one channel carries every name). A cost to
--   know: PostgreSQL serialises the commits of transactions that NOTIFY
--   (one queue lock), so they share no WAL flush (group commit). So a
--   release notifies only when a waiter is in line or an observer (an
--   Observe stream: table observed) watches the name, and a grant only
--   when an observer does (a waiter waits for releases, not grants):
--   uncontended names never notify, and a contended lock's handoff
--   notifies once, at the release.

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

CREATE TABLE IF NOT EXISTS __SCHEMA__.leasehold_schema_version (
  version integer NOT NULL
);

-- The fence counter (acquire.lua's counter key): one row, advanced by
-- next_fence in the grant's transaction (version 1 had a sequence, see
-- the seeding below).
CREATE TABLE IF NOT EXISTS __SCHEMA__.fence_counter (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  value bigint NOT NULL
);

-- A name's lock lease, or its tombstone (token NULL, left by a revoke):
-- acquire.lua's hash. token o, holder h, fence f, ttl_ms t, granted_ms g,
-- expires_ms e, delay_ms d, delay_until_ms u (revoke), noticed n, revoked r
-- (the revoked token while the tombstone stands: a retried Revoke finds
-- it); forget_ms: when the row may go (the key's expiry). released is
-- unused since releases are recorded per token (table ended); the column
-- stays so that a database migrated by an older build needs no DDL.
CREATE TABLE IF NOT EXISTS __SCHEMA__.leases (
  name text PRIMARY KEY,
  token text,
  holder text,
  fence bigint NOT NULL DEFAULT 0,
  ttl_ms bigint,
  granted_ms bigint,
  expires_ms bigint,
  delay_ms bigint,
  delay_until_ms bigint,
  noticed boolean NOT NULL DEFAULT false,
  released text,
  revoked text,
  forget_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_forget ON __SCHEMA__.leases (forget_ms);

-- Semaphore permits (semaphore_acquire.lua's hash, one row a permit). A
-- permit row lives until LINGER_MS past its expiry, so that its holder's
-- late request still learns "expired".
CREATE TABLE IF NOT EXISTS __SCHEMA__.permits (
  name text NOT NULL,
  token text NOT NULL,
  fence bigint NOT NULL,
  expires_ms bigint NOT NULL,
  ttl_ms bigint NOT NULL,
  granted_ms bigint NOT NULL,
  holder text NOT NULL,
  PRIMARY KEY (name, token)
);
CREATE INDEX IF NOT EXISTS permits_expiry ON __SCHEMA__.permits (expires_ms);

-- A semaphore name's "_f" (last fence); released is unused (see leases).
CREATE TABLE IF NOT EXISTS __SCHEMA__.semaphores (
  name text PRIMARY KEY,
  last_fence bigint NOT NULL DEFAULT 0,
  released text,
  forget_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS semaphores_forget ON __SCHEMA__.semaphores (forget_ms);

-- The end of a lease by its holder's or an operator's hand, or a reported
-- expiry once the lease's row went, per owner token (constants.lua's end
-- records): how ('x' released, 'r' revoked, 'e' expired and reported:
-- version 3), the lease's fence, and until when the record stands
-- (LINGER_MS after the end; a revoke's, after the revoked lease would have
-- ended too; an expiry's, after its report). A name is held by many leases
-- over time and at once (permits): each hears its own end however many
-- came after it.
CREATE TABLE IF NOT EXISTS __SCHEMA__.ended (
  name text NOT NULL,
  token text NOT NULL,
  how "char" NOT NULL,
  fence bigint NOT NULL,
  forget_ms bigint NOT NULL,
  PRIMARY KEY (name, token)
);
CREATE INDEX IF NOT EXISTS ended_forget ON __SCHEMA__.ended (forget_ms);

-- The wait line of a name (line.lua's two sorted sets in one table): a
-- waiter's arrival sequence and the deadline by which its broker must
-- have refreshed its place.
CREATE TABLE IF NOT EXISTS __SCHEMA__.line (
  name text NOT NULL,
  token text NOT NULL,
  seq bigint NOT NULL,
  deadline_ms bigint NOT NULL,
  PRIMARY KEY (name, token)
);
CREATE INDEX IF NOT EXISTS line_order ON __SCHEMA__.line (name, seq);
CREATE INDEX IF NOT EXISTS line_deadline ON __SCHEMA__.line (deadline_ms);

-- Names whose grants and releases some broker's observer (an election's
-- Observe stream) watches, until when its broker must have refreshed the
-- row (it does every second; rows of a broker that died lapse). A grant or
-- release of a name nobody observes and nobody waits for in line sends no
-- NOTIFY: PostgreSQL serialises the commits of notifying transactions.
CREATE TABLE IF NOT EXISTS __SCHEMA__.observed (
  name text PRIMARY KEY,
  until_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS observed_until ON __SCHEMA__.observed (until_ms);

-- The names of the three tables that can put something on a name (a lease
-- or a lock-delay, permits, waiters) in byte order, for list()'s walk
-- (version 5): the broker compares names as Rust compares strings, byte by
-- byte, which is the "C" collation's order, not the database's default
-- one (en_US and the like sort '_', '.' and case otherwise), and an index
-- serves a range only in its own collation. The primary keys stay for the
-- other functions' `name = p_name`, which any deterministic collation
-- answers alike.
CREATE INDEX IF NOT EXISTS leases_name_bytes ON __SCHEMA__.leases (name COLLATE "C");
CREATE INDEX IF NOT EXISTS permits_name_bytes ON __SCHEMA__.permits (name COLLATE "C");
CREATE INDEX IF NOT EXISTS line_name_bytes ON __SCHEMA__.line (name COLLATE "C");

-- The counter starts above every fence issued before it: version 1's
-- sequence (locked first, so that no grant of a broker still running
-- version 1 takes a value from it meanwhile; its value could be left below
-- an issued fence), every fence still recorded, and the clock in µs (each
-- fence was at least the clock when issued). The sequence then goes.
DO $$
DECLARE
  start bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  counted bigint;
BEGIN
  IF EXISTS (SELECT 1 FROM __SCHEMA__.fence_counter) THEN
    RETURN;
  END IF;
  IF to_regclass('__SCHEMA__.fences') IS NOT NULL THEN
    LOCK TABLE __SCHEMA__.fences IN ACCESS EXCLUSIVE MODE;
    EXECUTE 'SELECT last_value FROM __SCHEMA__.fences' INTO counted;
    start := greatest(start, counted);
  END IF;
  start := greatest(start,
    (SELECT coalesce(max(fence), 0) FROM __SCHEMA__.leases),
    (SELECT coalesce(max(fence), 0) FROM __SCHEMA__.permits),
    (SELECT coalesce(max(last_fence), 0) FROM __SCHEMA__.semaphores));
  INSERT INTO __SCHEMA__.fence_counter (one, value) VALUES (true, start);
END $$;
DROP SEQUENCE IF EXISTS __SCHEMA__.fences;

-- LINGER_MS (constants.lua).
CREATE OR REPLACE FUNCTION __SCHEMA__.linger_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT __LINGER_MS__::bigint $$;

-- The database clock in µs since the Unix epoch.
CREATE OR REPLACE FUNCTION __SCHEMA__.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- The advisory lock key of a name.
CREATE OR REPLACE FUNCTION __SCHEMA__.name_key(p_name text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT hashtextextended('__SCHEMA__/' || p_name, 0)
$$;

-- Takes the name's lock until the end of the transaction.
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_name(p_name text) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(__SCHEMA__.name_key(p_name))
$$;

-- The next fence (acquire.lua): the counter advanced to
-- greatest(counter + 1, last + 1, now_us, floor + 1) in one UPDATE, as the
-- Redis scripts advance theirs. The counter row's lock, held to commit,
-- orders the grants of every name: the counter never ends below a fence
-- issued, and no two grants get one fence. (Version 1 took nextval of a
-- sequence and then setval to the fence: two grants of different names at
-- once could set it in the wrong order and leave it below the higher
-- fence.) The cost: grants of different names serialise from this update
-- to their commit (BENCHMARKS.md).
CREATE OR REPLACE FUNCTION __SCHEMA__.next_fence(p_last bigint, p_now_us bigint, p_floor bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  fence bigint;
BEGIN
  UPDATE __SCHEMA__.fence_counter
     SET value = greatest(value + 1, p_last + 1, p_now_us, p_floor + 1)
  RETURNING value INTO fence;
  RETURN fence;
END $$;

CREATE OR REPLACE FUNCTION __SCHEMA__.notify(p_event text, p_next text, p_name text)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_notify('__SCHEMA__', p_event || ':' || left(coalesce(p_next, ''), 16) || ':' || p_name)
$$;

-- A broker's observers watch p_names for the next p_life ms.
CREATE OR REPLACE FUNCTION __SCHEMA__.observe(p_names text[], p_life bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$ BEGIN
  INSERT INTO __SCHEMA__.observed (name, until_ms)
  SELECT DISTINCT n, __SCHEMA__.now_us() / 1000 + p_life FROM unnest(p_names) AS n
  ON CONFLICT (name) DO UPDATE SET until_ms = greatest(__SCHEMA__.observed.until_ms, excluded.until_ms);
END $$;

-- Whether an observer watches the name now.
CREATE OR REPLACE FUNCTION __SCHEMA__.is_observed(p_name text, p_now_ms bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$ BEGIN
  RETURN EXISTS (SELECT 1 FROM __SCHEMA__.observed WHERE name = p_name AND until_ms > p_now_ms);
END $$;

-- Lapsed places leave the line (line.lua's prune).
CREATE OR REPLACE FUNCTION __SCHEMA__.prune(p_name text, p_now_ms bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$ BEGIN
  DELETE FROM __SCHEMA__.line WHERE name = p_name AND deadline_ms <= p_now_ms;
END $$;

-- The first waiter in line (after prune), or no row.
CREATE OR REPLACE FUNCTION __SCHEMA__.first_in_line(p_name text, OUT token text, OUT deadline_ms bigint)
LANGUAGE plpgsql VOLATILE AS $$ BEGIN
  SELECT l.token, l.deadline_ms INTO token, deadline_ms
    FROM __SCHEMA__.line l WHERE l.name = p_name ORDER BY l.seq LIMIT 1;
END $$;

CREATE OR REPLACE FUNCTION __SCHEMA__.line_length(p_name text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$ BEGIN
  RETURN (SELECT count(*) FROM __SCHEMA__.line WHERE name = p_name);
END $$;

-- queue.lua's wait_in_line: joins the line (or renews the place) if the
-- caller waits; its position (1 = next; 0 = not in the line).
CREATE OR REPLACE FUNCTION __SCHEMA__.wait_in_line(p_name text, p_token text, p_waits boolean, p_life bigint, p_now_ms bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  my_seq bigint;
BEGIN
  IF NOT p_waits THEN
    RETURN 0;
  END IF;
  INSERT INTO __SCHEMA__.line AS l (name, token, seq, deadline_ms)
  VALUES (p_name, p_token,
          coalesce((SELECT max(seq) FROM __SCHEMA__.line WHERE name = p_name), 0) + 1,
          p_now_ms + p_life)
  ON CONFLICT (name, token) DO UPDATE SET deadline_ms = excluded.deadline_ms
  RETURNING l.seq INTO my_seq;
  RETURN (SELECT count(*) FROM __SCHEMA__.line WHERE name = p_name AND seq <= my_seq);
END $$;

-- What acquire and semaphore_acquire answer.
DO $$ BEGIN
  CREATE TYPE __SCHEMA__.acquired AS (
    code integer, fence bigint, remaining_ms bigint, holder text,
    granted_ms bigint, pos bigint, queued bigint, expired integer);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- queue.lua's take_turn: NULL if the caller may take the free name (and
-- then it has left the line), else the "queued" answer.
CREATE OR REPLACE FUNCTION __SCHEMA__.take_turn(p_name text, p_token text, p_waits boolean, p_life bigint, p_now_ms bigint, p_fence bigint)
RETURNS __SCHEMA__.acquired LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  first record;
  far bigint := p_now_ms + p_life;
  deadline bigint;
  pos bigint;
BEGIN
  SELECT * INTO first FROM __SCHEMA__.first_in_line(p_name);
  IF first.token IS NOT NULL AND first.token <> p_token THEN
    deadline := first.deadline_ms;
    -- Longer than a life from now: the clock stepped back (queue.lua).
    IF deadline > far THEN
      deadline := far;
      UPDATE __SCHEMA__.line SET deadline_ms = far WHERE name = p_name AND token = first.token;
    END IF;
    pos := __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, p_now_ms);
    RETURN ROW(__GRANT_QUEUE__, p_fence, greatest(1, deadline - p_now_ms), '', 0, pos,
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  END IF;
  IF first.token IS NOT NULL THEN
    DELETE FROM __SCHEMA__.line WHERE name = p_name AND token = p_token;
  END IF;
  RETURN NULL;
END $$;

-- Drops p_name's expired permits, recording an 'e' end for each token (its
-- loss reported now: semaphore_acquire's and acquire.lua's rule), and
-- returns how many went. A permit grant runs it first; a lock grant runs
-- it once no permit of the name is live: a name held as permits that all expired is free for a lock, and
-- those permits' holders must hear "expired, reported" from then on, not
-- another owner's lock. The caller holds the name's lock.
CREATE OR REPLACE FUNCTION __SCHEMA__.drop_expired_permits(p_name text, p_now_ms bigint)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  dropped integer;
BEGIN
  WITH gone AS (
    DELETE FROM __SCHEMA__.permits d WHERE d.name = p_name AND d.expires_ms <= p_now_ms
    RETURNING d.token, d.fence),
  recorded AS (
    INSERT INTO __SCHEMA__.ended AS e (name, token, how, fence, forget_ms)
    SELECT p_name, gone.token, 'e', gone.fence, p_now_ms + __SCHEMA__.linger_ms() FROM gone
    ON CONFLICT (name, token) DO UPDATE SET how = excluded.how, fence = excluded.fence,
      forget_ms = excluded.forget_ms)
  SELECT count(*) INTO dropped FROM gone;
  RETURN dropped;
END $$;

-- acquire.lua: grant the lock if nobody holds it, it is not in its
-- lock-delay, no semaphore permit is held, and nobody queued before the
-- caller still waits.
--   p_name, p_token, p_ttl_ms, p_holder, p_floor (highest fence the broker
--   saw), p_delay_ms (lock-delay), p_waits (joins the line when not
--   granted), p_life (how long a place lasts unrefreshed, ms),
--   p_not_after_ms (this clock's time past which the broker has given up
--   on the call, or NULL: see postgres/deadline.rs)
-- Returns one `acquired`: code GRANT_GRANTED (fence, remaining_ms = TTL,
-- granted_ms, expired: the expired lease replaced, if unreported, plus the
-- expired permits of the name dropped, as in acquire.lua; each leaves an
-- 'e' end record for its token), GRANT_HELD, GRANT_LOCK_DELAY, GRANT_QUEUE; pos
-- and queued as acquire.lua's position and queued; GRANT_TOO_LATE (past p_not_after_ms, once
-- the name's lock is held: nothing read or written, so that a statement
-- that reached the server after its caller gave up grants nothing and
-- takes no place in line). Version 1's 8-argument acquire and
-- semaphore_acquire stay, for brokers of version 1 until they stop.
CREATE OR REPLACE FUNCTION __SCHEMA__.acquire(p_name text, p_token text, p_ttl_ms bigint, p_holder text, p_floor bigint, p_delay_ms bigint, p_waits boolean, p_life bigint, p_not_after_ms bigint)
RETURNS __SCHEMA__.acquired LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_us bigint;
  now_ms bigint;
  l __SCHEMA__.leases;
  found_row boolean;
  expiry bigint;
  delay_end bigint;
  first_permit bigint;
  queued __SCHEMA__.acquired;
  last bigint;
  fence bigint;
  expired integer := 0;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_us := __SCHEMA__.now_us();
  now_ms := now_us / 1000;
  IF now_ms > p_not_after_ms THEN
    RETURN ROW(__GRANT_TOO_LATE__, 0, 0, '', 0, 0, 0, 0)::__SCHEMA__.acquired;
  END IF;
  PERFORM __SCHEMA__.prune(p_name, now_ms);
  SELECT * INTO l FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > now_ms;
  found_row := FOUND;
  IF found_row AND l.token IS NOT NULL THEN
    expiry := l.expires_ms;
    -- More than its TTL left: the clock stepped back (acquire.lua).
    IF expiry - now_ms > l.ttl_ms THEN
      expiry := now_ms + l.ttl_ms;
      UPDATE __SCHEMA__.leases
         SET expires_ms = expiry,
             forget_ms = expiry + coalesce(l.delay_ms, 0) + __SCHEMA__.linger_ms()
       WHERE name = p_name;
    END IF;
    IF now_ms < expiry THEN
      IF l.token = p_token THEN
        RETURN ROW(__GRANT_GRANTED__, l.fence, l.ttl_ms, '', l.granted_ms, 0, 0, 0)::__SCHEMA__.acquired;
      END IF;
      RETURN ROW(__GRANT_HELD__, l.fence, expiry - now_ms, l.holder, l.granted_ms,
                 __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
                 __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
    END IF;
    delay_end := expiry + coalesce(l.delay_ms, 0);
    IF now_ms < delay_end THEN
      RETURN ROW(__GRANT_LOCK_DELAY__, l.fence, delay_end - now_ms, l.holder, l.granted_ms,
                 __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
                 __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
    END IF;
  ELSIF found_row AND l.delay_until_ms IS NOT NULL AND now_ms < l.delay_until_ms THEN
    RETURN ROW(__GRANT_LOCK_DELAY__, l.fence, l.delay_until_ms - now_ms, '', 0,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  END IF;

  -- Held as a semaphore: blocked until its permits are gone.
  SELECT min(p.expires_ms) INTO first_permit FROM __SCHEMA__.permits p
   WHERE p.name = p_name AND p.expires_ms > now_ms;
  IF first_permit IS NOT NULL THEN
    RETURN ROW(__GRANT_HELD__, coalesce(l.fence, 0), first_permit - now_ms, '(semaphore permits)', 0,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  END IF;

  -- Free: the first in line gets it.
  last := CASE WHEN found_row THEN l.fence ELSE 0 END;
  queued := __SCHEMA__.take_turn(p_name, p_token, p_waits, p_life, now_ms, last);
  IF queued IS NOT NULL THEN
    RETURN queued;
  END IF;
  fence := __SCHEMA__.next_fence(last, now_us, p_floor);
  -- An expired lease replaced here: reported now unless its holder heard
  -- it already, and recorded for its token (acquire.lua).
  IF found_row AND l.token IS NOT NULL AND l.token <> p_token THEN
    IF NOT l.noticed THEN
      expired := 1;
    END IF;
    PERFORM __SCHEMA__.record_end(p_name, l.token, 'e', l.fence, now_ms + __SCHEMA__.linger_ms());
  END IF;
  -- The name's permits, all expired (none is live, or it would not be
  -- free), go: reported now and recorded for their tokens (acquire.lua).
  expired := expired + __SCHEMA__.drop_expired_permits(p_name, now_ms);
  INSERT INTO __SCHEMA__.leases AS t
    (name, token, holder, fence, ttl_ms, granted_ms, expires_ms, delay_ms,
     delay_until_ms, noticed, released, revoked, forget_ms)
  VALUES (p_name, p_token, p_holder, fence, p_ttl_ms, now_ms, now_ms + p_ttl_ms, p_delay_ms,
          NULL, false, NULL, NULL,
          now_ms + p_ttl_ms + p_delay_ms + __SCHEMA__.linger_ms())
  ON CONFLICT (name) DO UPDATE SET
    token = excluded.token, holder = excluded.holder, fence = excluded.fence,
    ttl_ms = excluded.ttl_ms, granted_ms = excluded.granted_ms,
    expires_ms = excluded.expires_ms, delay_ms = excluded.delay_ms,
    delay_until_ms = NULL, noticed = false, released = excluded.released,
    revoked = excluded.revoked, forget_ms = excluded.forget_ms;
  IF __SCHEMA__.is_observed(p_name, now_ms) THEN
    PERFORM __SCHEMA__.notify('g', '', p_name);
  END IF;
  RETURN ROW(__GRANT_GRANTED__, fence, p_ttl_ms, '', now_ms, 0, 0, expired)::__SCHEMA__.acquired;
END $$;

-- semaphore_acquire.lua: grant one of p_limit permits on a name, if one is
-- free and nobody queued before the caller still waits. Arguments as
-- acquire's, with p_limit in place of the lock-delay; returns as acquire
-- (expired: the expired permits dropped here, their loss reported now,
-- each leaving an 'e' end record for its token).
CREATE OR REPLACE FUNCTION __SCHEMA__.semaphore_acquire(p_name text, p_token text, p_ttl_ms bigint, p_holder text, p_floor bigint, p_limit integer, p_waits boolean, p_life bigint, p_not_after_ms bigint)
RETURNS __SCHEMA__.acquired LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_us bigint;
  now_ms bigint;
  plain __SCHEMA__.leases;
  last bigint;
  expired integer;
  mine __SCHEMA__.permits;
  live bigint;
  first __SCHEMA__.permits;
  queued __SCHEMA__.acquired;
  fence bigint;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_us := __SCHEMA__.now_us();
  now_ms := now_us / 1000;
  IF now_ms > p_not_after_ms THEN
    RETURN ROW(__GRANT_TOO_LATE__, 0, 0, '', 0, 0, 0, 0)::__SCHEMA__.acquired;
  END IF;
  PERFORM __SCHEMA__.prune(p_name, now_ms);
  -- A name held as a plain lock has no permit to give, nor one in its
  -- lock-delay (semaphore_acquire.lua).
  SELECT * INTO plain FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > now_ms;
  IF FOUND AND plain.token IS NOT NULL AND plain.expires_ms > now_ms THEN
    RETURN ROW(__GRANT_HELD__, plain.fence, plain.expires_ms - now_ms, plain.holder, plain.granted_ms,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  ELSIF FOUND AND plain.token IS NOT NULL
        AND plain.expires_ms + coalesce(plain.delay_ms, 0) > now_ms THEN
    RETURN ROW(__GRANT_LOCK_DELAY__, plain.fence, plain.expires_ms + coalesce(plain.delay_ms, 0) - now_ms,
               plain.holder, plain.granted_ms,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  ELSIF FOUND AND plain.token IS NULL AND plain.delay_until_ms > now_ms THEN
    RETURN ROW(__GRANT_LOCK_DELAY__, plain.fence, plain.delay_until_ms - now_ms, '', 0,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), 0)::__SCHEMA__.acquired;
  END IF;
  SELECT coalesce(max(s.last_fence), 0) INTO last FROM __SCHEMA__.semaphores s
   WHERE s.name = p_name AND s.forget_ms > now_ms;
  -- More than its TTL left: the clock stepped back.
  UPDATE __SCHEMA__.permits SET expires_ms = now_ms + ttl_ms
   WHERE name = p_name AND expires_ms - now_ms > ttl_ms;
  expired := __SCHEMA__.drop_expired_permits(p_name, now_ms);
  SELECT * INTO mine FROM __SCHEMA__.permits WHERE name = p_name AND token = p_token;
  IF FOUND THEN
    RETURN ROW(__GRANT_GRANTED__, mine.fence, mine.ttl_ms, '', mine.granted_ms, 0, 0, expired)::__SCHEMA__.acquired;
  END IF;
  SELECT count(*) INTO live FROM __SCHEMA__.permits WHERE name = p_name;
  IF live >= p_limit THEN
    SELECT * INTO first FROM __SCHEMA__.permits WHERE name = p_name ORDER BY expires_ms LIMIT 1;
    RETURN ROW(__GRANT_HELD__, first.fence, first.expires_ms - now_ms, first.holder, first.granted_ms,
               __SCHEMA__.wait_in_line(p_name, p_token, p_waits, p_life, now_ms),
               __SCHEMA__.line_length(p_name), expired)::__SCHEMA__.acquired;
  END IF;
  queued := __SCHEMA__.take_turn(p_name, p_token, p_waits, p_life, now_ms, last);
  IF queued IS NOT NULL THEN
    queued.expired := expired;
    RETURN queued;
  END IF;
  fence := __SCHEMA__.next_fence(last, now_us, p_floor);
  INSERT INTO __SCHEMA__.permits (name, token, fence, expires_ms, ttl_ms, granted_ms, holder)
  VALUES (p_name, p_token, fence, now_ms + p_ttl_ms, p_ttl_ms, now_ms, p_holder);
  INSERT INTO __SCHEMA__.semaphores AS s (name, last_fence, released, forget_ms)
  VALUES (p_name, fence, NULL, now_ms + p_ttl_ms + __SCHEMA__.linger_ms())
  ON CONFLICT (name) DO UPDATE SET
    last_fence = excluded.last_fence,
    released = NULL,
    forget_ms = greatest(s.forget_ms, excluded.forget_ms);
  IF __SCHEMA__.is_observed(p_name, now_ms) THEN
    PERFORM __SCHEMA__.notify('g', '', p_name);
  END IF;
  RETURN ROW(__GRANT_GRANTED__, fence, p_ttl_ms, '', now_ms, 0, 0, expired)::__SCHEMA__.acquired;
END $$;

-- What a renewal, a look and a release answer (renew_lease.lua's and
-- release.lua's replies): code, ttl_ms, fence.
DO $$ BEGIN
  CREATE TYPE __SCHEMA__.renewal AS (code integer, ttl_ms bigint, fence bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- constants.lua's record_end: records how p_token's lease of p_name ended.
CREATE OR REPLACE FUNCTION __SCHEMA__.record_end(p_name text, p_token text, p_how "char", p_fence bigint, p_forget_ms bigint)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO __SCHEMA__.ended AS e (name, token, how, fence, forget_ms)
  VALUES (p_name, p_token, p_how, p_fence, p_forget_ms)
  ON CONFLICT (name, token) DO UPDATE SET how = excluded.how, fence = excluded.fence,
    forget_ms = excluded.forget_ms;
END $$;

-- The renewal code of p_token's recorded end, if any (constants.lua's
-- recorded_end, read as renew_lease.lua reads it): -4 released, -5 expired
-- and reported already, -2 revoked (with the fence); NULL when nothing is
-- recorded.
CREATE OR REPLACE FUNCTION __SCHEMA__.recorded_end(p_name text, p_token text, p_now_ms bigint)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql STABLE AS $$
DECLARE
  e __SCHEMA__.ended;
BEGIN
  SELECT * INTO e FROM __SCHEMA__.ended
   WHERE name = p_name AND token = p_token AND forget_ms > p_now_ms;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF e.how = 'x' THEN
    RETURN ROW(__LEASE_RELEASED__, 0, 0)::__SCHEMA__.renewal;
  ELSIF e.how = 'e' THEN
    RETURN ROW(__LEASE_EXPIRED_REPORTED__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  RETURN ROW(__LEASE_REVOKED__, 0, e.fence)::__SCHEMA__.renewal;
END $$;

-- Whether p_token has a permit row of p_name, live or expired but not yet
-- dropped (renew_permit's and release's look): a name held as a lock may
-- have been a semaphore just before, and that permit's holder must hear
-- its own end, not another owner's.
CREATE OR REPLACE FUNCTION __SCHEMA__.has_permit(p_name text, p_token text, p_now_ms bigint)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM __SCHEMA__.permits
                  WHERE name = p_name AND token = p_token
                    AND expires_ms + __SCHEMA__.linger_ms() > p_now_ms);
END $$;

-- renew_lease.lua's renew_lock (its codes: LEASE_DONE, LEASE_NOT_HELD and the
-- ends LEASE_NOT_OWNER to LEASE_EXPIRED_REPORTED): NULL when the
-- lease row knows nothing of the token (it may be a permit), or another
-- token holds the lock and p_token has a permit row: a permit that expired
-- before the lock's grant is its holder's own end, which renew_permit
-- reports (renew_lease.lua's renew()); LEASE_NOT_OWNER only for a token unknown as a
-- permit too. p_ttl_ms: the new TTL, 0 to keep the lease's own, -1 to only
-- look. The caller holds the name's lock.
CREATE OR REPLACE FUNCTION __SCHEMA__.renew_lock(p_name text, p_token text, p_ttl_ms bigint, p_now_ms bigint)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  l __SCHEMA__.leases;
  live boolean;
  ttl bigint;
  ended __SCHEMA__.renewal;
BEGIN
  SELECT * INTO l FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > p_now_ms;
  live := l.token IS NOT NULL AND p_now_ms < l.expires_ms;
  IF l.token = p_token THEN
    IF NOT live THEN
      IF l.noticed THEN
        RETURN ROW(__LEASE_EXPIRED_REPORTED__, 0, 0)::__SCHEMA__.renewal;
      END IF;
      UPDATE __SCHEMA__.leases SET noticed = true WHERE name = p_name;
      RETURN ROW(__LEASE_EXPIRED__, 0, 0)::__SCHEMA__.renewal;
    END IF;
    IF p_ttl_ms = __TTL_LOOK__ THEN
      RETURN ROW(__LEASE_DONE__, l.ttl_ms, l.fence)::__SCHEMA__.renewal;
    END IF;
    ttl := CASE WHEN p_ttl_ms = __TTL_KEEP__ THEN l.ttl_ms ELSE p_ttl_ms END;
    UPDATE __SCHEMA__.leases
       SET ttl_ms = ttl, expires_ms = p_now_ms + ttl,
           forget_ms = p_now_ms + ttl + coalesce(l.delay_ms, 0) + __SCHEMA__.linger_ms()
     WHERE name = p_name;
    RETURN ROW(__LEASE_DONE__, ttl, l.fence)::__SCHEMA__.renewal;
  END IF;
  -- Not the holder: this token's own end (of a lock or a permit), recorded
  -- per token.
  ended := __SCHEMA__.recorded_end(p_name, p_token, p_now_ms);
  IF ended IS NOT NULL THEN
    RETURN ended;
  END IF;
  IF live AND NOT __SCHEMA__.has_permit(p_name, p_token, p_now_ms) THEN
    RETURN ROW(__LEASE_NOT_OWNER__, 0, l.fence)::__SCHEMA__.renewal;
  END IF;
  RETURN NULL;
END $$;

-- renew_lease.lua's renew_permit, after renew_lock (which looked at the
-- token's recorded end). An expired permit is dropped, reported (-3) and
-- its end recorded ('e'). The caller holds the name's lock.
CREATE OR REPLACE FUNCTION __SCHEMA__.renew_permit(p_name text, p_token text, p_ttl_ms bigint, p_now_ms bigint)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  p __SCHEMA__.permits;
  ttl bigint;
BEGIN
  SELECT * INTO p FROM __SCHEMA__.permits
   WHERE name = p_name AND token = p_token AND expires_ms + __SCHEMA__.linger_ms() > p_now_ms;
  IF FOUND THEN
    IF p.expires_ms <= p_now_ms THEN
      DELETE FROM __SCHEMA__.permits WHERE name = p_name AND token = p_token;
      PERFORM __SCHEMA__.record_end(p_name, p_token, 'e', p.fence, p_now_ms + __SCHEMA__.linger_ms());
      RETURN ROW(__LEASE_EXPIRED__, 0, 0)::__SCHEMA__.renewal;
    END IF;
    IF p_ttl_ms = __TTL_LOOK__ THEN
      RETURN ROW(__LEASE_DONE__, p.ttl_ms, p.fence)::__SCHEMA__.renewal;
    END IF;
    ttl := CASE WHEN p_ttl_ms = __TTL_KEEP__ THEN p.ttl_ms ELSE p_ttl_ms END;
    UPDATE __SCHEMA__.permits SET ttl_ms = ttl, expires_ms = p_now_ms + ttl
     WHERE name = p_name AND token = p_token;
    UPDATE __SCHEMA__.semaphores
       SET forget_ms = greatest(forget_ms, p_now_ms + ttl + __SCHEMA__.linger_ms())
     WHERE name = p_name;
    RETURN ROW(__LEASE_DONE__, ttl, p.fence)::__SCHEMA__.renewal;
  END IF;
  -- A released or reported permit's end: renew_lock looked at it already.
  RETURN ROW(__LEASE_NOT_HELD__, 0, 0)::__SCHEMA__.renewal;
END $$;

-- renew.lua: renew (or, with -1, look at) one lease, only for its owner.
CREATE OR REPLACE FUNCTION __SCHEMA__.renew(p_name text, p_token text, p_ttl_ms bigint)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint;
  r __SCHEMA__.renewal;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_ms := __SCHEMA__.now_us() / 1000;
  r := __SCHEMA__.renew_lock(p_name, p_token, p_ttl_ms, now_ms);
  IF r IS NULL THEN
    r := __SCHEMA__.renew_permit(p_name, p_token, p_ttl_ms, now_ms);
  END IF;
  RETURN r;
END $$;

-- renew_many.lua: renew a batch, each lease only for its owner, in one
-- statement (one heartbeat). The names are locked first, in ascending key
-- order, so that concurrent batches never deadlock. Returns one renewal
-- per lease, in order (ord: its 1-based index).
CREATE OR REPLACE FUNCTION __SCHEMA__.renew_many(p_names text[], p_tokens text[], p_ttls bigint[])
RETURNS TABLE (ord integer, code integer, ttl_ms bigint, fence bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k bigint;
  now_ms bigint;
  r __SCHEMA__.renewal;
BEGIN
  FOR k IN SELECT DISTINCT __SCHEMA__.name_key(n) AS key FROM unnest(p_names) AS n ORDER BY key LOOP
    PERFORM pg_advisory_xact_lock(k);
  END LOOP;
  now_ms := __SCHEMA__.now_us() / 1000;
  FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
    r := __SCHEMA__.renew_lock(p_names[i], p_tokens[i], p_ttls[i], now_ms);
    IF r IS NULL THEN
      r := __SCHEMA__.renew_permit(p_names[i], p_tokens[i], p_ttls[i], now_ms);
    END IF;
    ord := i;
    code := r.code;
    ttl_ms := r.ttl_ms;
    fence := r.fence;
    RETURN NEXT;
  END LOOP;
END $$;

-- release.lua: end a lease, only for its owner (no lock-delay), and wake
-- the first in line. Returns a renewal whose code is release.lua's (LEASE_DONE
-- released, LEASE_RELEASED_ALREADY, LEASE_NOT_HELD no record, LEASE_NOT_OWNER another owner (fence): a
-- token unknown as a permit too, LEASE_REVOKED (fence), LEASE_EXPIRED, the first
-- report (an expired permit leaves an 'e' end record, also while a lock
-- granted since holds the name), LEASE_EXPIRED_REPORTED).
CREATE OR REPLACE FUNCTION __SCHEMA__.release(p_name text, p_token text)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint;
  l __SCHEMA__.leases;
  live boolean;
  p __SCHEMA__.permits;
  next_token text;
  ended __SCHEMA__.renewal;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_ms := __SCHEMA__.now_us() / 1000;
  SELECT * INTO l FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > now_ms;
  live := l.token IS NOT NULL AND now_ms < l.expires_ms;
  IF l.token = p_token AND NOT live THEN
    IF l.noticed THEN
      RETURN ROW(__LEASE_EXPIRED_REPORTED__, 0, 0)::__SCHEMA__.renewal;
    END IF;
    UPDATE __SCHEMA__.leases SET noticed = true WHERE name = p_name;
    RETURN ROW(__LEASE_EXPIRED__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  IF live AND l.token = p_token THEN
    -- The row goes at once; the release is recorded for this token alone,
    -- for LINGER_MS (release.lua).
    DELETE FROM __SCHEMA__.leases WHERE name = p_name;
    PERFORM __SCHEMA__.record_end(p_name, p_token, 'x', l.fence, now_ms + __SCHEMA__.linger_ms());
    PERFORM __SCHEMA__.prune(p_name, now_ms);
    SELECT token INTO next_token FROM __SCHEMA__.first_in_line(p_name);
    IF next_token IS NOT NULL OR __SCHEMA__.is_observed(p_name, now_ms) THEN
      PERFORM __SCHEMA__.notify('r', next_token, p_name);
    END IF;
    RETURN ROW(__LEASE_DONE__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  -- Not the lock's holder: this token's own end, a permit, or a stranger.
  ended := __SCHEMA__.recorded_end(p_name, p_token, now_ms);
  IF ended.code = __LEASE_RELEASED__ THEN
    RETURN ROW(__LEASE_RELEASED_ALREADY__, 0, 0)::__SCHEMA__.renewal;
  ELSIF ended IS NOT NULL THEN
    RETURN ended;
  END IF;
  IF live AND NOT __SCHEMA__.has_permit(p_name, p_token, now_ms) THEN
    RETURN ROW(__LEASE_NOT_OWNER__, 0, l.fence)::__SCHEMA__.renewal;
  END IF;
  DELETE FROM __SCHEMA__.permits
   WHERE name = p_name AND token = p_token AND expires_ms + __SCHEMA__.linger_ms() > now_ms
  RETURNING * INTO p;
  IF NOT FOUND THEN
    RETURN ROW(__LEASE_NOT_HELD__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  IF p.expires_ms <= now_ms THEN
    PERFORM __SCHEMA__.record_end(p_name, p_token, 'e', p.fence, now_ms + __SCHEMA__.linger_ms());
    RETURN ROW(__LEASE_EXPIRED__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  PERFORM __SCHEMA__.record_end(p_name, p_token, 'x', p.fence, now_ms + __SCHEMA__.linger_ms());
  -- A free permit may serve any waiter in line: wake them all.
  IF __SCHEMA__.line_length(p_name) > 0 OR __SCHEMA__.is_observed(p_name, now_ms) THEN
    PERFORM __SCHEMA__.notify('r', '', p_name);
  END IF;
  RETURN ROW(__LEASE_DONE__, 0, 0)::__SCHEMA__.renewal;
END $$;

-- revoke.lua: end the current lease, whoever holds it; its lock-delay
-- starts now; every waiter is woken. Returns a renewal whose code is
-- revoke.lua's: REVOKE_DONE, REVOKE_ALREADY, REVOKE_NOTHING; with the fence.
CREATE OR REPLACE FUNCTION __SCHEMA__.revoke(p_name text)
RETURNS __SCHEMA__.renewal LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint;
  l __SCHEMA__.leases;
  delay_end bigint;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_ms := __SCHEMA__.now_us() / 1000;
  SELECT * INTO l FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > now_ms;
  IF NOT FOUND OR l.token IS NULL THEN
    IF l.revoked IS NOT NULL THEN
      RETURN ROW(__REVOKE_ALREADY__, 0, l.fence)::__SCHEMA__.renewal;
    END IF;
    RETURN ROW(__REVOKE_NOTHING__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  IF now_ms >= l.expires_ms THEN
    RETURN ROW(__REVOKE_NOTHING__, 0, 0)::__SCHEMA__.renewal;
  END IF;
  delay_end := now_ms + coalesce(l.delay_ms, 0);
  UPDATE __SCHEMA__.leases
     SET token = NULL, holder = NULL, granted_ms = NULL, ttl_ms = NULL, expires_ms = NULL,
         delay_ms = NULL, noticed = false, released = NULL, revoked = l.token,
         delay_until_ms = delay_end,
         forget_ms = greatest(l.expires_ms, delay_end) + __SCHEMA__.linger_ms()
   WHERE name = p_name;
  PERFORM __SCHEMA__.record_end(p_name, l.token, 'r', l.fence,
                                greatest(l.expires_ms, delay_end) + __SCHEMA__.linger_ms());
  PERFORM __SCHEMA__.notify('r', '', p_name);
  RETURN ROW(__REVOKE_DONE__, 0, l.fence)::__SCHEMA__.renewal;
END $$;

-- describe.lua: the current lease of a name, without its owner token.
-- held; fence (the last one remembered, 0 if none); remaining_ms (of the
-- lease, or when free of a lock-delay); holder, granted_ms, ttl_ms,
-- delay_ms (when held); waiters (live places); permits (live permits).
-- STABLE: its reads share one snapshot (the statement's), so the lease, the
-- waiters and the permits it reports are of one moment, as describe.lua's
-- are; it writes nothing and takes no lock.
CREATE OR REPLACE FUNCTION __SCHEMA__.describe(p_name text,
  OUT held boolean, OUT fence bigint, OUT remaining_ms bigint, OUT holder text,
  OUT granted_ms bigint, OUT ttl_ms bigint, OUT delay_ms bigint,
  OUT waiters bigint, OUT permits bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  now_ms bigint := __SCHEMA__.now_us() / 1000;
  l __SCHEMA__.leases;
BEGIN
  SELECT count(*) INTO waiters FROM __SCHEMA__.line
   WHERE name = p_name AND deadline_ms >= now_ms;
  SELECT count(*) INTO permits FROM __SCHEMA__.permits
   WHERE name = p_name AND expires_ms > now_ms;
  SELECT * INTO l FROM __SCHEMA__.leases WHERE name = p_name AND forget_ms > now_ms;
  held := false;
  fence := coalesce(l.fence, 0);
  remaining_ms := 0;
  IF l.token IS NOT NULL THEN
    IF now_ms < l.expires_ms THEN
      held := true;
      remaining_ms := l.expires_ms - now_ms;
      holder := l.holder;
      granted_ms := l.granted_ms;
      ttl_ms := l.ttl_ms;
      delay_ms := coalesce(l.delay_ms, 0);
    ELSE
      remaining_ms := greatest(0, l.expires_ms + coalesce(l.delay_ms, 0) - now_ms);
    END IF;
  ELSIF l.delay_until_ms IS NOT NULL THEN
    remaining_ms := greatest(0, l.delay_until_ms - now_ms);
  END IF;
END $$;

-- The least text above every text that starts with p_prefix, in byte order
-- (COLLATE "C"): p_prefix with its last character raised by one code point
-- (dropped first while it is the last code point, U+10FFFF; a surrogate,
-- no character, skipped); NULL when there is none (the empty prefix: every
-- text starts with it). So `name >= p_prefix AND name < prefix_end` is the
-- names that start with p_prefix, as a range an index serves; LIKE would
-- read `_` as a wildcard, and its prefix would need escaping.
CREATE OR REPLACE FUNCTION __SCHEMA__.prefix_end(p_prefix text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  rest text := p_prefix;
  c integer;
BEGIN
  WHILE rest <> '' LOOP
    c := ascii(right(rest, 1));
    rest := left(rest, -1);
    IF c < 1114111 THEN
      c := CASE WHEN c + 1 BETWEEN 55296 AND 57343 THEN 57344 ELSE c + 1 END;
      RETURN rest || chr(c);
    END IF;
  END LOOP;
  RETURN NULL;
END $$;

-- One page of a listing's walk (store::Backend::list): the names that
-- start with p_prefix, in byte order (COLLATE "C", the broker's order),
-- after p_after (NULL: from the start), that have a row in leases, permits
-- or line (a name with none has nothing on it), at most p_budget of them,
-- each with describe()'s columns (the broker leaves out the idle ones);
-- more: whether names may follow the page's last one (the next page starts
-- after it).
-- The cost is bounded by p_budget whatever the tables hold: each table
-- gives at most p_budget + 1 names (the one more tells whether the walk
-- goes on) from its byte-order index (*_name_bytes): leases, one name a
-- row, by one range scan; permits and line, several rows a name (a
-- semaphore's permits, a long line), by a skip scan, one index descent per
-- distinct name, so that a line of 10,000 waiters costs one step, not
-- 10,000 rows. A table that gave all p_budget + 1 may hold names above its
-- last: the page stops at the lowest such last name, so that no name is
-- passed over. Then describe() runs on the page's names. STABLE, as
-- describe(): one snapshot, no lock, nothing written.
CREATE OR REPLACE FUNCTION __SCHEMA__.list(p_prefix text, p_after text, p_budget integer)
RETURNS TABLE (name text, more boolean, held boolean, fence bigint, remaining_ms bigint,
               holder text, granted_ms bigint, ttl_ms bigint, delay_ms bigint,
               waiters bigint, permits bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
  lo text := p_prefix;
  hi text := __SCHEMA__.prefix_end(p_prefix);
  k integer := p_budget + 1;
  of_leases text[];
  of_permits text[];
  of_line text[];
  cutoff text;
  names text[];
  v_more boolean;
BEGIN
  -- The least text above p_after: text holds no NUL byte, so none lies
  -- between p_after and p_after || chr(1). One lower bound, `>=`, for
  -- the start and a resumed walk alike.
  IF p_after IS NOT NULL AND p_after COLLATE "C" >= p_prefix COLLATE "C" THEN
    lo := p_after || chr(1);
  END IF;
  -- Two forms, not `hi IS NULL OR name < hi`: the plan is kept for the
  -- session, and in that form the bound would be a filter, not the range's
  -- end, and a short range would read on to the end of the index.
  IF hi IS NULL THEN
    of_leases := ARRAY(SELECT l.name FROM __SCHEMA__.leases l
                        WHERE l.name COLLATE "C" >= lo
                        ORDER BY l.name COLLATE "C" LIMIT k);
  ELSE
    of_leases := ARRAY(SELECT l.name FROM __SCHEMA__.leases l
                        WHERE l.name COLLATE "C" >= lo AND l.name COLLATE "C" < hi
                        ORDER BY l.name COLLATE "C" LIMIT k);
  END IF;
  -- The skip scans stop at hi in their recursion (a step past it is the
  -- last): there the bound may be a filter.
  of_permits := ARRAY(
    WITH RECURSIVE s(n, i) AS (
      (SELECT p.name, 1 FROM __SCHEMA__.permits p WHERE p.name COLLATE "C" >= lo
        ORDER BY p.name COLLATE "C" LIMIT 1)
      UNION ALL
      SELECT (SELECT p.name FROM __SCHEMA__.permits p WHERE p.name COLLATE "C" > s.n
               ORDER BY p.name COLLATE "C" LIMIT 1), s.i + 1
        FROM s WHERE s.n IS NOT NULL AND s.i < k AND (hi IS NULL OR s.n COLLATE "C" < hi))
    SELECT s.n FROM s WHERE s.n IS NOT NULL AND (hi IS NULL OR s.n COLLATE "C" < hi)
     ORDER BY s.i);
  of_line := ARRAY(
    WITH RECURSIVE s(n, i) AS (
      (SELECT q.name, 1 FROM __SCHEMA__.line q WHERE q.name COLLATE "C" >= lo
        ORDER BY q.name COLLATE "C" LIMIT 1)
      UNION ALL
      SELECT (SELECT q.name FROM __SCHEMA__.line q WHERE q.name COLLATE "C" > s.n
               ORDER BY q.name COLLATE "C" LIMIT 1), s.i + 1
        FROM s WHERE s.n IS NOT NULL AND s.i < k AND (hi IS NULL OR s.n COLLATE "C" < hi))
    SELECT s.n FROM s WHERE s.n IS NOT NULL AND (hi IS NULL OR s.n COLLATE "C" < hi)
     ORDER BY s.i);
  IF cardinality(of_leases) = k THEN
    cutoff := of_leases[k];
  END IF;
  IF cardinality(of_permits) = k
     AND (cutoff IS NULL OR of_permits[k] COLLATE "C" < cutoff COLLATE "C") THEN
    cutoff := of_permits[k];
  END IF;
  IF cardinality(of_line) = k
     AND (cutoff IS NULL OR of_line[k] COLLATE "C" < cutoff COLLATE "C") THEN
    cutoff := of_line[k];
  END IF;
  names := ARRAY(SELECT u.n FROM unnest(of_leases || of_permits || of_line) AS u(n)
                  WHERE cutoff IS NULL OR u.n COLLATE "C" <= cutoff COLLATE "C"
                  GROUP BY u.n ORDER BY u.n COLLATE "C" LIMIT k);
  v_more := cardinality(names) > p_budget;
  RETURN QUERY
    SELECT c.n, v_more, d.held, d.fence, d.remaining_ms, d.holder, d.granted_ms, d.ttl_ms,
           d.delay_ms, d.waiters, d.permits
      FROM unnest(names[1:p_budget]) WITH ORDINALITY AS c(n, i)
      CROSS JOIN LATERAL __SCHEMA__.describe(c.n) AS d
     ORDER BY c.i;
END $$;

-- dequeue.lua: a waiter leaves the line; if it was first, the next is
-- woken. Returns 1 if it was in line, 0 if not.
CREATE OR REPLACE FUNCTION __SCHEMA__.dequeue(p_name text, p_token text)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint;
  first_token text;
  next_token text;
  removed integer;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_ms := __SCHEMA__.now_us() / 1000;
  PERFORM __SCHEMA__.prune(p_name, now_ms);
  SELECT token INTO first_token FROM __SCHEMA__.first_in_line(p_name);
  DELETE FROM __SCHEMA__.line WHERE name = p_name AND token = p_token;
  GET DIAGNOSTICS removed = ROW_COUNT;
  IF removed > 0 AND first_token = p_token THEN
    SELECT token INTO next_token FROM __SCHEMA__.first_in_line(p_name);
    PERFORM __SCHEMA__.notify('r', next_token, p_name);
  END IF;
  RETURN removed;
END $$;

-- refresh.lua: renew the places of a broker's waiters on one name in one
-- statement. Returns each token's rank (0: first in line), or -1 when it
-- has no place (it must acquire again, at the back), in order.
CREATE OR REPLACE FUNCTION __SCHEMA__.refresh(p_name text, p_life bigint, p_tokens text[])
RETURNS TABLE (ord bigint, rank bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint;
BEGIN
  PERFORM __SCHEMA__.lock_name(p_name);
  now_ms := __SCHEMA__.now_us() / 1000;
  PERFORM __SCHEMA__.prune(p_name, now_ms);
  UPDATE __SCHEMA__.line SET deadline_ms = now_ms + p_life
   WHERE name = p_name AND token = ANY (p_tokens);
  RETURN QUERY
    WITH ranked AS (
      SELECT l.token, row_number() OVER (ORDER BY l.seq) - 1 AS r
        FROM __SCHEMA__.line l WHERE l.name = p_name)
    SELECT t.i, coalesce(ranked.r, __RANK_NONE__)
      FROM unnest(p_tokens) WITH ORDINALITY AS t(token, i)
      LEFT JOIN ranked ON ranked.token = t.token
     ORDER BY t.i;
END $$;

-- Deletes rows whose time is up (what Redis key expiry does): at most
-- p_limit of each kind per call, skipping any name a call is working on
-- (pg_try_advisory_xact_lock), so that nothing grows per distinct name.
-- Returns how many rows went.
CREATE OR REPLACE FUNCTION __SCHEMA__.sweep(p_limit integer)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_ms bigint := __SCHEMA__.now_us() / 1000;
  total bigint := 0;
  n bigint;
BEGIN
  DELETE FROM __SCHEMA__.leases WHERE name IN (
    SELECT name FROM __SCHEMA__.leases WHERE forget_ms <= now_ms LIMIT p_limit)
   AND forget_ms <= now_ms AND pg_try_advisory_xact_lock(__SCHEMA__.name_key(name));
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM __SCHEMA__.line WHERE (name, token) IN (
    SELECT name, token FROM __SCHEMA__.line WHERE deadline_ms <= now_ms LIMIT p_limit)
   AND deadline_ms <= now_ms AND pg_try_advisory_xact_lock(__SCHEMA__.name_key(name));
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM __SCHEMA__.permits WHERE (name, token) IN (
    SELECT name, token FROM __SCHEMA__.permits
     WHERE expires_ms + __SCHEMA__.linger_ms() <= now_ms LIMIT p_limit)
   AND expires_ms + __SCHEMA__.linger_ms() <= now_ms
   AND pg_try_advisory_xact_lock(__SCHEMA__.name_key(name));
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM __SCHEMA__.ended WHERE (name, token) IN (
    SELECT name, token FROM __SCHEMA__.ended WHERE forget_ms <= now_ms LIMIT p_limit)
   AND forget_ms <= now_ms;
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM __SCHEMA__.observed WHERE name IN (
    SELECT name FROM __SCHEMA__.observed WHERE until_ms <= now_ms LIMIT p_limit)
   AND until_ms <= now_ms;
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  DELETE FROM __SCHEMA__.semaphores WHERE name IN (
    SELECT name FROM __SCHEMA__.semaphores WHERE forget_ms <= now_ms LIMIT p_limit)
   AND forget_ms <= now_ms AND pg_try_advisory_xact_lock(__SCHEMA__.name_key(name));
  GET DIAGNOSTICS n = ROW_COUNT;
  total := total + n;
  RETURN total;
END $$;

-- Version 5 (from 4, no new codes): list() and prefix_end() for the
-- listing's walk, and the byte-order indexes of the names it reads
-- (*_name_bytes). A broker of version 4 still running never calls them;
-- it pays for the three indexes on its writes.
--
-- Version 4 (from 3, no DDL, no new codes): a lock grant drops the name's
-- expired permits and reports them (drop_expired_permits), and renew_lock
-- and release ask the permits before answering -1 (has_permit). A broker
-- of version 3 still running calls these functions and reads their codes,
-- which are version 3's.
--
-- Version 3 (from 2, no DDL): the functions record the end of an expired
-- lease for its token once its row goes ('e' in ended) and answer -5 to
-- its holder's later requests, where version 2 answered 0 (no record). A
-- broker of version 2 still running reads -5 as an unknown code (an
-- INTERNAL error) until it is upgraded.
INSERT INTO __SCHEMA__.leasehold_schema_version (version)
SELECT 5 WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.leasehold_schema_version);
UPDATE __SCHEMA__.leasehold_schema_version SET version = 5 WHERE version < 5;
