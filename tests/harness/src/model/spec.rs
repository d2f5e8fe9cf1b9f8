//! The contract of one name, executable: what a lock or semaphore name may
//! answer to each call, given everything linearized before it. Written from
//! the proto's promises (leasehold.proto's file comment, its calls' and
//! fields' comments) and docs/guarantees.md's, not from any store's code:
//!
//! - at most one lease of a lock, at most `limit` permits of a semaphore,
//!   never both on one name; a try (`wait = 0`) or a wait that runs out
//!   fails with ABORTED only while the name is held, in its lock-delay, or
//!   someone is in its line;
//! - every grant's fence is above every earlier grant's of the name;
//! - a lease lives its TTL from the moment the store applied the grant or
//!   the last renewal, and no longer unless renewed (TTL decides, not luck);
//! - renew, heartbeat and release act only with the token of a live lease
//!   (compare-and-set); release ends it without lock-delay, an expiry or a
//!   revoke with the lease's lock-delay, during which nobody is granted;
//! - for at least [`RECORD`] after a lease's end, its token is answered by
//!   how it ended: a repeated release succeeds again, a revoked holder hears
//!   REVOKED, an expired one EXPIRED (or NOT_OWNER once someone else holds
//!   the name); a loss is never told for a live lease, nor with a reason
//!   that did not happen;
//! - a revoke ends the lock's current lease; repeated before anything else
//!   was granted it reports the same fence again;
//! - CheckFence and Leader report the lock's current lease (an election is
//!   a lock: its leader the holder, its term the fence);
//! - a holder that writes within its own deadline (send time + ttl_ms)
//!   writes under a live lease, unless something no deadline foresees ended
//!   it early (a revoke, a store that lost it, its clock stepped forward),
//!   and the fenced resource refuses exactly the fences below one it took;
//! - the store's own events, recorded by the nemesis: data lost (a wipe:
//!   every lease ends, records go, fences still rise), its clock stepped,
//!   a failover that loses nothing acknowledged.
//!
//! Instants are [`Span`]s (see the module above), and [`Name::step`]
//! returns every state the call may leave, empty when its answer is
//! impossible.

use std::collections::BTreeMap;

/// Microseconds since the start of the run, on the test's monotonic clock.
pub type Micros = i64;

/// How far the store's clock and its TTL arithmetic may be off the test's
/// clock (millisecond rounding of TTLs and timestamps, the store and the
/// test reading different clocks of one machine).
pub const EPSILON: Micros = 25_000;

/// How long the store keeps the record of a lease's end at least (the
/// proto: "for at least 10 seconds").
pub const RECORD: Micros = 10_000_000;

/// How long past its end the model remembers a token at all: past this,
/// a record is surely gone from every store (they keep it 10 s) and the
/// token is answered as a stranger's.
pub const FORGET: Micros = 60_000_000;

/// How long after its call ends a waiter may still stand in the name's
/// line: a kept place lasts 3 s, and the waiters of a broker that died
/// leave within 3 s (AcquireRequest.keep_place and wait_timeout_ms).
pub const PLACE_LINGER: Micros = 3_500_000;

/// `ms` milliseconds (a TTL, a wait or a lock-delay: the workload's, a
/// broker's answer's or a saved history's) in [`Micros`].
///
/// # Panics
///
/// If it does not fit i64 microseconds (292,000 years): no lease of a
/// run, but a corrupt answer or history, which must not wrap into a short
/// or negative TTL.
pub fn ms_to_micros(ms: u64) -> Micros {
    Micros::try_from(ms)
        .ok()
        .and_then(|ms| ms.checked_mul(1000))
        .expect("a duration in ms that fits i64 microseconds")
}

/// How a store's clock reads the TTLs of a run: the unit its leases
/// have (a TTL or lock-delay is rounded up to it, and the broker answers
/// the rounded one), and how late past its end it may take a lease away.
/// Memory, Redis and PostgreSQL: to the millisecond, on time. etcd: whole
/// seconds, and its leader revokes an expired lease within half a second
/// (its lessor looks every 500 ms) plus the revocation's Raft write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StoreClock {
    /// The unit of TTLs, in milliseconds (0 or 1: exact).
    pub unit_ms: u64,
    /// How late a lease may end past its TTL.
    pub late: Micros,
}

impl StoreClock {
    /// The TTL (or lock-delay) the store applies when asked for `ms`.
    pub fn applied(self, ms: u64) -> u64 {
        if self.unit_ms <= 1 {
            ms
        } else {
            ms.div_ceil(self.unit_ms).saturating_mul(self.unit_ms)
        }
    }
}

/// An instant known only to lie within `lo..=hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// The earliest the instant can be.
    pub lo: Micros,
    /// The latest it can be (never below `lo`).
    pub hi: Micros,
}

impl Span {
    /// The span `lo..=hi`; a `hi` below `lo` is taken as `lo` (the
    /// instant is then known exactly).
    pub fn new(lo: Micros, hi: Micros) -> Self {
        Span { lo, hi: hi.max(lo) }
    }
}

/// A token, numbered by the history (the model never sees the secret).
pub type Token = u32;

/// What a lease is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The one lease of a lock.
    Lock,
    /// One permit of a semaphore of `limit` permits.
    Permit {
        /// How many permits the name has at once (the Acquire's `limit`).
        limit: u32,
    },
}

/// How a lease may have ended (or may end): a set, because a call that got
/// no answer may or may not have ended it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ends(u8);

impl Ends {
    /// Its TTL ran out, unrenewed: starts the lease's lock-delay.
    pub const EXPIRED: Ends = Ends(1);
    /// Its holder released it: no lock-delay.
    pub const RELEASED: Ends = Ends(2);
    /// Revoked by an operator: starts the lock-delay, and the holder hears
    /// REVOKED.
    pub const REVOKED: Ends = Ends(4);
    /// The store lost it with its data (a wipe): no lock-delay, and the
    /// holder hears STORE_LOST where a session remembers the lease.
    pub const STORE_LOST: Ends = Ends(8);
    /// Not a way of ending but a mark: a step of the store's clock forward
    /// may have brought the end before its holder's deadline.
    pub const STEPPED: Ends = Ends(16);

    /// Whether this set holds `e` (any of `e`'s ways, for a set).
    pub fn has(self, e: Ends) -> bool {
        self.0 & e.0 != 0
    }
    /// This set with `e`'s ways added.
    pub fn with(self, e: Ends) -> Ends {
        Ends(self.0 | e.0)
    }
    /// Whether every way in this set starts the lease's lock-delay.
    fn always_delays(self) -> bool {
        !self.has(Ends::RELEASED) && !self.has(Ends::STORE_LOST)
    }
    /// Whether some way in this set starts it.
    fn may_delay(self) -> bool {
        self.has(Ends::EXPIRED) || self.has(Ends::REVOKED)
    }
}

/// A lease that may be alive.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Its owner token, as the history numbers it.
    pub token: Token,
    /// The fence its grant carried.
    pub fence: u64,
    /// The lock's lease, or one of a semaphore's permits.
    pub kind: Kind,
    /// When it ends unless renewed first.
    pub ends_at: Span,
    /// How it ends then.
    pub how: Ends,
    /// The lock-delay its Acquire asked for: after an expiry or a revoke,
    /// nobody is granted the name this long (0 for none; a permit's starts
    /// none).
    pub lock_delay_ms: u64,
    /// Calls on it without an answer that may still take effect (held in a
    /// stalled path, they can arrive after later calls were answered).
    pub pending: Vec<Pending>,
}

/// A renewal (`ttl_ms`) or a release (`None`) without an answer, which may
/// take effect at any moment up to `until`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    /// The end of the call's window: the latest it may take effect.
    pub until: Micros,
    /// The TTL the renewal or heartbeat asked for; `None` for a release.
    pub ttl_ms: Option<u64>,
}

impl Lease {
    /// Widens the lease's end by what its pending calls may still do at
    /// any moment from `from` on, and forgets those that can no longer.
    fn widen_by_pending(&mut self, from: Micros, late: Micros) {
        self.pending.retain(|p| p.until >= from);
        for p in &self.pending {
            match p.ttl_ms {
                None => {
                    self.ends_at.lo = self.ends_at.lo.min(from);
                    self.how = self.how.with(Ends::RELEASED);
                }
                Some(ttl) => {
                    let ttl = ms_to_micros(ttl);
                    self.ends_at = Span::new(
                        self.ends_at.lo.min(from + ttl - EPSILON),
                        self.ends_at.hi.max(p.until + ttl + EPSILON + late),
                    );
                }
            }
        }
    }
}

/// The record of a lease's end.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct End {
    /// How it ended (a set: a call without an answer may or may not have
    /// ended it).
    pub how: Ends,
    /// When it ended.
    pub at: Span,
    /// The lease's fence, its kind and its lock-delay: what a step back of
    /// the store's clock needs to bring an expired lease back to life
    /// ([`Call::ClockStep`]).
    pub fence: u64,
    /// The lease's kind (see `fence`).
    pub kind: Kind,
    /// The lease's lock-delay, in milliseconds (see `fence`).
    pub lock_delay_ms: u64,
    /// The store lost its record since (a wipe): it answers the token as a
    /// stranger's, or, where a session of the broker remembers renewing
    /// the lease, as lost by the store. The model still knows how the
    /// lease ended (for the holder's writes).
    pub forgotten: bool,
}

/// A call to the broker about one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// Acquire (a lock, or a permit of a semaphore), waiting up to `wait_ms`;
    /// also an election's Campaign (a lock without lock-delay).
    Acquire {
        /// A lock, or a permit of a semaphore of how many.
        kind: Kind,
        /// The TTL asked for; a grant must carry this one.
        ttl_ms: u64,
        /// How long to wait while the name is not free; 0 tries once.
        wait_ms: u64,
        /// The lock-delay asked for (0 for none).
        lock_delay_ms: u64,
        /// Whether a wait that runs out keeps the caller's place in the
        /// name's line (AcquireRequest.keep_place).
        keep_place: bool,
    },
    /// Renew: extend the lease of `token`.
    Renew {
        /// The lease's owner token, numbered.
        token: Token,
        /// The new TTL asked for, from when the store applies it (0 keeps
        /// the lease's own).
        ttl_ms: u64,
    },
    /// One lease of a KeepAlive heartbeat.
    Beat {
        /// The lease's owner token, numbered.
        token: Token,
        /// The new TTL the heartbeat asked for (0 keeps the lease's own).
        ttl_ms: u64,
    },
    /// Release (or an election's Resign): end the lease of `token` now,
    /// without lock-delay.
    Release {
        /// The lease's owner token, numbered.
        token: Token,
    },
    /// Revoke: end whichever lease holds the lock now, as an operator does.
    Revoke,
    /// CheckFence: is `fence` the fence of the lease that holds the name
    /// now?
    CheckFence {
        /// The fence a writer presents.
        fence: u64,
    },
    /// Leader: who leads the election (a lock name) now.
    Leader,
    /// A write to the fenced resource (which keeps the highest fence it
    /// accepted per name and refuses lower ones) by the holder of `token`,
    /// whose own deadline (its request's send time + the TTL granted) had
    /// not passed when the write returned if `believed`: a holder that
    /// checks its deadline and writes.
    Write {
        /// The writer's owner token, numbered.
        token: Token,
        /// The fence its grant carried, presented with the write.
        fence: u64,
        /// Whether the write returned before the holder's own deadline.
        believed: bool,
    },
    /// Not a call: the store lost all its data at some moment of the
    /// window (restarted empty).
    Wipe,
    /// Not a call: the store's primary died and a replica took its place,
    /// within the window. What the primary acknowledged was acknowledged
    /// by a replica too (`--replica-acks`, synchronous replication), so
    /// nothing may be lost: the model changes nothing.
    Failover,
    /// Not a call: the store's clock stepped by `delta_ms` (forward if
    /// positive) at some moment of the window: leases alive then end that
    /// much sooner (or later), by the true clock.
    ClockStep {
        /// How far the clock moved, in milliseconds: forward if positive.
        delta_ms: i64,
    },
}

/// Why a heartbeat says a lease is lost (the proto's LossReason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The TTL ran out before a renewal reached the store.
    Expired,
    /// It expired and another owner holds the name now, and the store no
    /// longer remembers the token's lease.
    NotOwner,
    /// The store lost it before its TTL could have run out (a wipe).
    StoreLost,
    /// An operator revoked it.
    Revoked,
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Acquire's success: a lease.
    Granted {
        /// Its owner token, numbered.
        token: Token,
        /// Its fence: above every earlier grant's of the name.
        fence: u64,
        /// The TTL the store applied.
        ttl_ms: u64,
    },
    /// ABORTED: not obtained.
    Aborted,
    /// Renew's or a heartbeat's success.
    Alive {
        /// The renewed lease's fence (its grant's).
        fence: u64,
        /// The TTL the store applied, from the renewal on.
        ttl_ms: u64,
    },
    /// Release's success.
    Released,
    /// NOT_FOUND.
    NotFound,
    /// FAILED_PRECONDITION: another owner holds the name.
    NotOwner,
    /// A heartbeat's STATE_LOST.
    Lost(Reason),
    /// Revoke's success.
    Revoked {
        /// The revoked lease's fence.
        fence: u64,
    },
    /// CheckFence's answer.
    Fence {
        /// Whether the fence asked about is the current lease's.
        current: bool,
        /// The fence of the lease that holds the name now; 0 if it is free.
        current_fence: u64,
    },
    /// Leader's answer.
    Leader {
        /// Whether the election has a leader now.
        present: bool,
        /// The leader's term: its lease's fence.
        term: u64,
    },
    /// No answer: UNAVAILABLE, a deadline, a broken connection, a heartbeat's
    /// STATE_UNCONFIRMED. The call may or may not have taken effect.
    Unknown,
    /// The fenced resource took the write.
    Accepted,
    /// The fenced resource refused it: it had taken a higher fence.
    Refused,
    /// The answer of [`Call::Wipe`] and [`Call::ClockStep`]: it happened.
    Happened,
}

/// What the model needs to know about the rest of the history.
pub trait Context {
    /// Whether someone other than the call being checked may stand in the
    /// name's line at some moment of `during`.
    fn line_may_be_busy(&self, during: Span) -> bool;

    /// Whether a grant whose answer never came may hold the name (or its
    /// lock-delay) at some moment of `during`. Such a grant is not in the
    /// state: nobody knows its token or fence, it may have happened at any
    /// moment of its window, or not at all, and the broker releases a grant
    /// that raced its call's end. It only excuses answers that a holder
    /// would explain (ABORTED, another owner, a revoke finding a lease);
    /// it never excuses two known holders at once.
    fn unknown_grant_may_hold(&self, during: Span) -> bool;
}

/// The state of one name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Name {
    /// How the store's clock reads TTLs (the same in every state).
    pub clock: StoreClock,
    /// Leases that may be alive.
    pub leases: Vec<Lease>,
    /// The highest fence granted so far (a lower bound when a grant's
    /// answer never came).
    pub last_fence: u64,
    /// When the lock-delay of the last involuntary end runs out; `lo` is
    /// the earliest it can have run out.
    pub delay_until: Option<Span>,
    /// The ends of leases, by token, while the store must remember them.
    pub ends: BTreeMap<Token, End>,
    /// The fence of the last revoked lock lease, while nothing was granted
    /// since (a retried Revoke reports it again).
    pub last_revoked: Option<u64>,
    /// The earliest instant the next call can take effect at: linearized
    /// calls take effect in order.
    pub now: Micros,
    /// The highest fence the fenced resource accepted for the name.
    pub written: u64,
}

/// Where, in its window, a call takes effect.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// The earliest the call may take effect: its invocation, or later
    /// where its answer says so (an ABORTED wait looked at the name late).
    pub from: Micros,
    /// The latest the search places it at: when its answer came (for a
    /// call without one, the end of its window; for a renewal, heartbeat
    /// or release without one, its invocation, its effects widened to
    /// `late`).
    pub to: Micros,
    /// The latest the call may take effect: `to`, or for a call without an
    /// answer the end of its window (it is placed at its invocation, its
    /// possible effects widened to reach this far).
    pub late: Micros,
}

impl Name {
    /// Every state `call`, answered `answer` and taking effect within
    /// `window`, may leave this name in; empty if the answer is impossible.
    pub fn step(
        &self,
        call: &Call,
        answer: &Answer,
        window: Window,
        ctx: &dyn Context,
    ) -> Vec<Name> {
        let mut out = Vec::new();
        let mut start = self.clone();
        start.now = start.now.max(window.from);
        if start.now > window.to {
            return out;
        }
        // Decide, for each lease and the lock-delay, whether it has ended
        // by the moment the call takes effect, branching where that moment's
        // window leaves it open.
        for settled in start.settle(window.to) {
            settled.apply(call, answer, window, ctx, &mut out);
        }
        out
    }

    /// Every way the leases' and the delay's ends can fall relative to a
    /// moment in `self.now..=to`.
    fn settle(self, to: Micros) -> Vec<Name> {
        let tokens: Vec<Token> = self.leases.iter().map(|l| l.token).collect();
        let mut states = vec![self];
        for token in tokens {
            let mut next = Vec::with_capacity(states.len());
            for s in states {
                let Some(i) = s.alive(token) else {
                    next.push(s);
                    continue;
                };
                let Span { lo, hi } = s.leases[i].ends_at;
                if to < lo {
                    // Surely still alive.
                    next.push(s);
                    continue;
                }
                if s.now < hi {
                    // May still be alive: then it ends after this moment.
                    let mut alive = s.clone();
                    alive.leases[i].ends_at.lo = lo.max(alive.now);
                    next.push(alive);
                }
                // May have ended (surely, if `now >= hi`): by this moment.
                let mut ended = s;
                ended.now = ended.now.max(lo);
                let lease = ended.leases.remove(i);
                ended.end(&lease, Span::new(lo, hi.min(to)));
                next.push(ended);
            }
            states = next;
        }
        // The lock-delay: over, or not yet.
        let mut out = Vec::with_capacity(states.len());
        for s in states {
            match s.delay_until {
                Some(d) if to >= d.lo => {
                    if s.now < d.hi {
                        let mut on = s.clone();
                        on.delay_until = Some(Span::new(d.lo.max(on.now), d.hi));
                        out.push(on);
                    }
                    let mut off = s;
                    off.now = off.now.max(d.lo);
                    off.delay_until = None;
                    out.push(off);
                }
                _ => out.push(s),
            }
        }
        out
    }

    /// Records the end of `lease` at `at`, with its lock-delay.
    fn end(&mut self, lease: &Lease, at: Span) {
        if lease.kind == Kind::Lock && lease.lock_delay_ms > 0 && lease.how.may_delay() {
            let d = ms_to_micros(lease.lock_delay_ms);
            let lo = if lease.how.always_delays() {
                at.lo + d
            } else {
                at.lo
            };
            let span = Span::new(lo - EPSILON, at.hi + d + EPSILON + self.clock.late);
            self.delay_until = Some(match self.delay_until {
                Some(old) => Span::new(old.lo.max(span.lo), old.hi.max(span.hi)),
                None => span,
            });
        }
        if lease.kind == Kind::Lock && lease.how.has(Ends::REVOKED) {
            self.last_revoked = Some(lease.fence);
        }
        self.ends.insert(
            lease.token,
            End {
                how: lease.how,
                at,
                fence: lease.fence,
                kind: lease.kind,
                lock_delay_ms: lease.lock_delay_ms,
                forgotten: false,
            },
        );
    }

    fn alive(&self, token: Token) -> Option<usize> {
        self.leases.iter().position(|l| l.token == token)
    }

    /// Whether a lease other than `token`'s is alive.
    fn held_by_other(&self, token: Token) -> bool {
        self.leases.iter().any(|l| l.token != token)
    }

    /// Whether the name is a semaphore's (by the calls made on it so far).
    fn is_semaphore(&self) -> bool {
        self.leases
            .iter()
            .any(|l| matches!(l.kind, Kind::Permit { .. }))
    }

    fn apply(
        mut self,
        call: &Call,
        answer: &Answer,
        window: Window,
        ctx: &dyn Context,
        out: &mut Vec<Name>,
    ) {
        let from = self.now;
        let to = window.to;
        let during = Span::new(from, to);
        let ghost = ctx.unknown_grant_may_hold(during);
        // A lease the call's success starts or extends ends at a moment
        // this call's window plus the TTL brackets.
        let clock = self.clock;
        let lasting = |ttl_ms: u64| {
            Span::new(
                from + ms_to_micros(ttl_ms) - EPSILON,
                to + ms_to_micros(ttl_ms) + EPSILON + clock.late,
            )
        };
        // Forget ends no store can still remember.
        self.ends.retain(|_, e| e.at.hi + FORGET > from);
        match (call, answer) {
            (
                Call::Acquire {
                    kind,
                    ttl_ms,
                    lock_delay_ms,
                    ..
                },
                Answer::Granted {
                    token,
                    fence,
                    ttl_ms: got,
                },
            ) => {
                if !self.free_for(*kind)
                    || *fence <= self.last_fence
                    || *got != clock.applied(*ttl_ms)
                    || self.ends.contains_key(token)
                    || self.alive(*token).is_some()
                {
                    return;
                }
                self.last_fence = *fence;
                // Revoke acts on a name's lock lease only (a permit is not
                // revocable): a permit granted since leaves a retried
                // revoke's answer as it was.
                if *kind == Kind::Lock {
                    self.last_revoked = None;
                }
                self.leases.push(Lease {
                    token: *token,
                    fence: *fence,
                    kind: *kind,
                    ends_at: lasting(*got),
                    how: Ends::EXPIRED,
                    lock_delay_ms: clock.applied(*lock_delay_ms),
                    pending: Vec::new(),
                });
                out.push(self);
            }
            (Call::Acquire { kind, .. }, Answer::Aborted)
                if (!self.free_for(*kind) || ctx.line_may_be_busy(during) || ghost) =>
            {
                out.push(self);
            }
            // Not searched: see Context::unknown_grant_may_hold.
            (Call::Acquire { .. }, Answer::Unknown) => out.push(self),
            (
                Call::Renew { token, .. } | Call::Beat { token, .. },
                Answer::Alive { fence, ttl_ms },
            ) => {
                let Some(i) = self.alive(*token) else { return };
                if self.leases[i].fence != *fence {
                    return;
                }
                let requested = match call {
                    Call::Renew { ttl_ms, .. } | Call::Beat { ttl_ms, .. } => *ttl_ms,
                    _ => unreachable!(),
                };
                if requested != 0 && clock.applied(requested) != *ttl_ms {
                    return;
                }
                let lease = &mut self.leases[i];
                lease.ends_at = lasting(*ttl_ms);
                lease.how = Ends::EXPIRED;
                // A call still in flight may yet undo or shorten this.
                lease.widen_by_pending(from, clock.late);
                out.push(self);
            }
            (Call::Renew { token, ttl_ms } | Call::Beat { token, ttl_ms }, Answer::Unknown) => {
                // Applied or not, at any moment of its window: the lease
                // then ends as it would have, or `ttl` after that moment,
                // which may be sooner (a shorter TTL) or later.
                if let Some(i) = self.alive(*token) {
                    let lease = &mut self.leases[i];
                    lease.pending.push(Pending {
                        until: window.late,
                        ttl_ms: Some(clock.applied(*ttl_ms)),
                    });
                    lease.widen_by_pending(from, clock.late);
                }
                out.push(self);
            }
            (Call::Release { token }, Answer::Released) => {
                if let Some(i) = self.alive(*token) {
                    let mut lease = self.leases.remove(i);
                    lease.how = Ends::RELEASED;
                    self.end(&lease, during);
                    out.push(self);
                } else if self
                    .ends
                    .get(token)
                    .is_some_and(|e| e.how.has(Ends::RELEASED) && !e.forgotten)
                {
                    // A repeated release (surely within the record's life,
                    // or maybe past it: a store may keep a record longer).
                    out.push(self);
                }
            }
            (Call::Release { token }, Answer::Unknown) => {
                if let Some(i) = self.alive(*token) {
                    let lease = &mut self.leases[i];
                    lease.pending.push(Pending {
                        until: window.late,
                        ttl_ms: None,
                    });
                    lease.widen_by_pending(from, clock.late);
                }
                out.push(self);
            }
            (
                Call::Renew { token, .. } | Call::Release { token },
                Answer::NotFound | Answer::NotOwner,
            ) => {
                let release = matches!(call, Call::Release { .. });
                if self.alive(*token).is_none()
                    && self.gone_answer_ok(*token, release, answer, to, ghost)
                {
                    out.push(self);
                }
            }
            (Call::Beat { token, .. }, Answer::Lost(_))
                if self.alive(*token).is_none()
                    && self.gone_answer_ok(*token, false, answer, to, ghost) =>
            {
                out.push(self);
            }
            (Call::Revoke, Answer::Revoked { fence }) => {
                if let Some(i) = self
                    .leases
                    .iter()
                    .position(|l| l.kind == Kind::Lock && l.fence == *fence)
                {
                    let mut lease = self.leases.remove(i);
                    lease.how = Ends::REVOKED;
                    self.end(&lease, during);
                    out.push(self);
                } else if self.leases.iter().all(|l| l.kind != Kind::Lock)
                    && self.last_revoked == Some(*fence)
                {
                    // A repeated revoke, nothing granted since.
                    out.push(self);
                } else if self.leases.iter().all(|l| l.kind != Kind::Lock)
                    && ghost
                    && *fence > self.last_fence
                {
                    // The revoke of a grant whose answer never came.
                    self.last_fence = *fence;
                    self.last_revoked = Some(*fence);
                    out.push(self);
                }
            }
            (Call::Revoke, Answer::NotFound)
                if self.leases.iter().all(|l| l.kind != Kind::Lock) =>
            {
                out.push(self);
            }
            (Call::Revoke, Answer::Unknown) => {
                for lease in self.leases.iter_mut().filter(|l| l.kind == Kind::Lock) {
                    lease.ends_at.lo = lease.ends_at.lo.min(from);
                    lease.how = lease.how.with(Ends::REVOKED);
                }
                out.push(self);
            }
            (
                Call::CheckFence { fence },
                Answer::Fence {
                    current,
                    current_fence,
                },
            ) => {
                let lock = self.leases.iter().find(|l| l.kind == Kind::Lock);
                let ok = match lock {
                    None if ghost => true,
                    None => *current_fence == 0 && !*current,
                    Some(l) => *current_fence == l.fence && *current == (*fence == l.fence),
                };
                if ok {
                    out.push(self);
                }
            }
            (Call::CheckFence { .. } | Call::Leader, Answer::Unknown) => out.push(self),
            (Call::Leader, Answer::Leader { present, term }) => {
                // An election is a lock: its leader is the lock's holder,
                // its term the lease's fence.
                let lock = self.leases.iter().find(|l| l.kind == Kind::Lock);
                let ok = match lock {
                    None if ghost => true,
                    None => !*present,
                    Some(l) => *present && *term == l.fence,
                };
                if ok {
                    out.push(self);
                }
            }
            (
                Call::Write {
                    token,
                    fence,
                    believed,
                },
                answer @ (Answer::Accepted | Answer::Refused),
            ) => {
                // The resource itself: a fence below the highest accepted
                // is refused, any other taken.
                if (*answer == Answer::Accepted) != (*fence >= self.written) {
                    return;
                }
                // A holder within its own deadline writes under a live
                // lease, unless the lease ended early by what no deadline
                // foresees (a revoke, a store that lost it): the deadline
                // rule of the proto (send time + ttl_ms is never too late;
                // "a Redis clock stepped forward expires leases early").
                if *believed && self.alive(*token).is_none() {
                    let early = self.ends.get(token).is_some_and(|e| {
                        e.how.has(Ends::REVOKED)
                            || e.how.has(Ends::STORE_LOST)
                            || e.how.has(Ends::STEPPED)
                    });
                    if !early {
                        return;
                    }
                }
                self.written = self.written.max(*fence);
                out.push(self);
            }
            (Call::ClockStep { delta_ms }, Answer::Happened) => {
                let d = delta_ms * 1000;
                // Stepped back, the store's clock puts a lease that expired
                // less than the step ago back before its expiry: if the
                // store had not reclaimed it yet (Redis expires keys lazily,
                // and a permit is dropped by whoever finds it expired), it
                // is alive again, and its holder may renew it. Either may be.
                let revivable: Vec<Token> = if d < 0 {
                    self.ends
                        .iter()
                        .filter(|(_, e)| {
                            e.how.has(Ends::EXPIRED)
                                && !e.how.has(Ends::RELEASED)
                                && !e.how.has(Ends::REVOKED)
                                && !e.forgotten
                                && e.at.hi - d > from
                        })
                        .map(|(t, _)| *t)
                        .take(4)
                        .collect()
                } else {
                    Vec::new()
                };
                // Forward, everything ends `d` sooner. Back, it may end up to
                // `d` later, or no later than it would have: the stores
                // never leave a lease more than its TTL, so the first call
                // that looks at it after the step (any call, on any broker)
                // counts its TTL from then on.
                let moved = |span: Span| {
                    if d > 0 {
                        Span::new(span.lo - d, span.hi - d)
                    } else {
                        Span::new(span.lo, span.hi - d)
                    }
                };
                let shift = |mut state: Name| {
                    for lease in &mut state.leases {
                        lease.ends_at = moved(lease.ends_at);
                        if d > 0 {
                            lease.how = lease.how.with(Ends::STEPPED);
                        }
                    }
                    if let Some(delay) = &mut state.delay_until {
                        *delay = moved(*delay);
                    }
                    if d > 0 {
                        for end in state.ends.values_mut() {
                            end.at = moved(end.at);
                        }
                    }
                    state
                };
                for subset in 1..(1u32 << revivable.len()) {
                    let mut revived = self.clone();
                    for (i, token) in revivable.iter().enumerate() {
                        if subset & (1 << i) != 0 {
                            let end = revived.ends.remove(token).expect("a revivable end");
                            revived.leases.push(Lease {
                                token: *token,
                                fence: end.fence,
                                kind: end.kind,
                                // Alive from the step on, for at most the step.
                                ends_at: Span::new(from, end.at.hi),
                                how: Ends::EXPIRED,
                                lock_delay_ms: end.lock_delay_ms,
                                pending: Vec::new(),
                            });
                        }
                    }
                    // The revived leases' lock-delay had not started.
                    if revived.leases.iter().any(|l| l.kind == Kind::Lock) {
                        revived.delay_until = None;
                    }
                    out.push(shift(revived));
                }
                out.push(shift(self));
            }
            (Call::Failover, Answer::Happened) => out.push(self),
            (Call::Wipe, Answer::Happened) => {
                // Every live lease is lost now; records and delays go with
                // the data, fences must still rise (the proto).
                let leases = std::mem::take(&mut self.leases);
                for end in self.ends.values_mut() {
                    end.forgotten = true;
                }
                self.delay_until = None;
                self.last_revoked = None;
                for mut lease in leases {
                    lease.how = Ends::STORE_LOST;
                    let token = lease.token;
                    self.end(&lease, during);
                    self.ends.get_mut(&token).expect("just ended").forgotten = true;
                }
                out.push(self);
            }
            _ => {}
        }
    }

    /// Whether a lease of `kind` may be granted now.
    fn free_for(&self, kind: Kind) -> bool {
        if self.delay_until.is_some() {
            return false;
        }
        match kind {
            Kind::Lock => self.leases.is_empty(),
            Kind::Permit { limit } => {
                self.leases
                    .iter()
                    .all(|l| matches!(l.kind, Kind::Permit { .. }))
                    && u32::try_from(self.leases.len()).is_ok_and(|n| n < limit.max(1))
            }
        }
    }

    /// Whether `answer` is one the contract allows for a renewal, a
    /// heartbeat or (`release`) a release with `token`, whose lease is not
    /// alive, taking effect by `to`.
    fn gone_answer_ok(
        &self,
        token: Token,
        release: bool,
        answer: &Answer,
        to: Micros,
        ghost: bool,
    ) -> bool {
        let held = self.held_by_other(token) || ghost;
        // A semaphore's permits have no single owner, and a grant whose
        // answer never came may or may not hold the name: a stranger's
        // token there may be answered either way.
        let loose = self.is_semaphore() || ghost;
        let as_stranger = |answer: &Answer| match answer {
            Answer::NotFound | Answer::Lost(Reason::Expired) => !held || loose,
            Answer::NotOwner | Answer::Lost(Reason::NotOwner) => held,
            _ => false,
        };
        let Some(end) = self.ends.get(&token) else {
            return as_stranger(answer);
        };
        if end.forgotten {
            return as_stranger(answer) || *answer == Answer::Lost(Reason::StoreLost);
        }
        // Past RECORD the store may have forgotten it.
        if to >= end.at.lo + RECORD && as_stranger(answer) {
            return true;
        }
        let how = end.how;
        let expired = how.has(Ends::EXPIRED) || how.has(Ends::STORE_LOST);
        match answer {
            // A release repeated with the token that released succeeds.
            Answer::NotFound => !(release && how == Ends::RELEASED),
            // Renew's "FAILED_PRECONDITION if another owner holds the name"
            // (the proto) applies to a released token too.
            Answer::NotOwner => held && (expired || (!release && how.has(Ends::RELEASED))),
            Answer::Lost(Reason::NotOwner) => held && expired,
            Answer::Lost(Reason::Revoked) => how.has(Ends::REVOKED),
            // The proto has no reason for "released": a heartbeat that
            // crossed its own release hears EXPIRED (and is not counted).
            Answer::Lost(Reason::Expired) => expired || how.has(Ends::RELEASED),
            Answer::Lost(Reason::StoreLost) => how.has(Ends::STORE_LOST),
            _ => false,
        }
    }
}
