//! Is a history linearizable against the model? Wing and Gong's search
//! ("Testing and verifying concurrent objects", 1993) with Lowe's
//! memoization of visited configurations ("Testing for linearizability",
//! 2017), per name: a name's calls never touch another name's state, so the
//! history splits by name (P-compositionality) and each search stays small.
//!
//! Why this and not stateright's `LinearizabilityTester` or porcupine: the
//! model is nondeterministic (a step returns every state an uncertain
//! instant allows) and time-aware (a call's effect window narrows spans in
//! the state), which a tester built for deterministic sequential specs
//! cannot express; the search itself is 100 lines.
//!
//! The search: take the calls in invocation order; any call invoked before
//! every pending call returned may be linearized next; try it, with each
//! state the model allows, and go on; a configuration (calls done, state)
//! seen before is not searched twice. A failure names the call that could
//! not be placed, and [`minimize`] shrinks the history to a small one that
//! still fails there.

use std::{
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
};

use super::{
    history::{format_op, Op},
    spec::{
        ms_to_micros, Answer, Call, Context, Micros, Name, Span, StoreClock, Window, PLACE_LINGER,
    },
};

/// How long before its answer an ABORTED wait's last look at the name may
/// have been: the broker answers at the end of the wait, right after it
/// (a second, for a loaded machine), unless a fault delayed the answer: a
/// stopped broker or a stalled path to its clients holds it back for up to
/// the nemesis' longest fault (faults come one at a time).
pub const WAIT_TAIL: Micros = {
    let fault = super::nemesis::MAX_FAULT.as_micros();
    // Seconds, far inside i64's microseconds: the cast below keeps it.
    assert!(
        fault <= 3_600_000_000,
        "MAX_FAULT is a fault's hold, not an hour"
    );
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a const cannot call i64::try_from; the assertion above bounds it"
    )]
    let fault = fault as Micros;
    1_000_000 + fault
};

/// How many configurations one name's search may visit before it gives up
/// (a history too tangled to decide is reported, never passed).
pub const BUDGET: u64 = 3_000_000;

/// How close in time to the failing call [`minimize`] keeps every lease:
/// a lease alive then may be why its answer is wrong.
const NEAR: Micros = 2_000_000;

/// The outcome of checking one name's history.
#[derive(Debug)]
pub enum Verdict {
    /// Linearizable.
    Ok {
        /// How many configurations the search visited to find an order.
        visited: u64,
    },
    /// Not: no order of the calls places them all.
    Violation {
        /// The calls that could not be placed after the longest
        /// linearizable prefix found (those the model refuses outright
        /// there, or every candidate if it refuses none), as indices into
        /// the `ops` given to [`check`].
        stuck: Vec<usize>,
        /// How many calls that longest prefix placed.
        prefix: usize,
    },
    /// The search ran out of budget.
    GaveUp {
        /// How many configurations it visited before it stopped (just past
        /// [`BUDGET`]).
        visited: u64,
    },
}

/// A name's calls, in invocation order, with their effect windows.
struct Entry<'a> {
    op: &'a Op,
    window: Window,
}

/// Where, in its call, an answer says the call took effect.
fn window_of(op: &Op) -> Window {
    let mut from = op.invoked;
    let mut to = op.returned;
    match (&op.call, &op.answer) {
        (Call::Acquire { wait_ms, .. }, Answer::Aborted) if *wait_ms > 0 => {
            from = from.max(op.returned - WAIT_TAIL);
        }
        // A renewal, heartbeat or release without an answer acts on its
        // own token only: placed at its invocation, with its effect
        // widened to the end of its window (the spec's `late`), it covers
        // every moment it may have taken effect at, and the search need
        // not try it at each of them. A revoke acts on whichever lease
        // holds the name when it arrives, so it keeps its whole window.
        (Call::Renew { .. } | Call::Beat { .. } | Call::Release { .. }, Answer::Unknown) => {
            to = from;
        }
        _ => {}
    }
    Window {
        from,
        to,
        late: op.returned,
    }
}

/// Whether the search places `op` at all: a grant without an answer is
/// left to [`Context::unknown_grant_may_hold`], a CheckFence without one
/// changed nothing.
fn searched(op: &Op) -> bool {
    !matches!(
        (&op.call, &op.answer),
        (
            Call::Acquire { .. } | Call::CheckFence { .. } | Call::Leader,
            Answer::Unknown
        )
    )
}

/// The name's line: when each waiter may stand in it; and when a grant
/// whose answer never came may hold the name.
struct Line {
    waits: Vec<(usize, Span)>,
    ghosts: Vec<Span>,
}

impl Line {
    fn of(entries: &[Entry<'_>], unknown_grants: &[&Op]) -> Line {
        let ghosts = unknown_grants
            .iter()
            .map(|op| {
                let Call::Acquire {
                    ttl_ms,
                    lock_delay_ms,
                    ..
                } = op.call
                else {
                    unreachable!()
                };
                let lasts = ms_to_micros(ttl_ms + lock_delay_ms) + crate::model::spec::EPSILON;
                Span::new(op.invoked, op.returned + lasts)
            })
            .collect();
        let waits = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match &e.op.call {
                Call::Acquire {
                    wait_ms,
                    keep_place,
                    ..
                } if *wait_ms > 0 => {
                    // A waiter that gave up leaves the line when its broker
                    // dequeues it, soon after the call ends (retried every
                    // 200 ms if the store does not answer).
                    let linger = match e.op.answer {
                        Answer::Granted { .. } => 0,
                        Answer::Unknown => PLACE_LINGER,
                        _ if *keep_place => PLACE_LINGER,
                        _ => 1_000_000,
                    };
                    Some((i, Span::new(e.op.invoked, e.op.returned + linger)))
                }
                _ => None,
            })
            .collect();
        Line { waits, ghosts }
    }
}

struct LineContext<'a> {
    line: &'a Line,
    me: usize,
}

impl Context for LineContext<'_> {
    fn line_may_be_busy(&self, during: Span) -> bool {
        self.line
            .waits
            .iter()
            .any(|(i, s)| *i != self.me && s.lo <= during.hi && during.lo <= s.hi)
    }

    fn unknown_grant_may_hold(&self, during: Span) -> bool {
        self.line
            .ghosts
            .iter()
            .any(|s| s.lo <= during.hi && during.lo <= s.hi)
    }
}

struct Search<'a> {
    entries: Vec<Entry<'a>>,
    line: Line,
    done: Vec<bool>,
    memo: HashSet<(u64, u64)>,
    visited: u64,
    deepest: usize,
    /// The deepest configuration reached (calls done, state).
    stuck_at: Option<(Vec<bool>, Name)>,
}

fn key(done: &[bool], state: &Name) -> (u64, u64) {
    let mut a = std::collections::hash_map::DefaultHasher::new();
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0xA5u8.hash(&mut b);
    done.hash(&mut a);
    state.hash(&mut a);
    done.hash(&mut b);
    state.hash(&mut b);
    (a.finish(), b.finish())
}

impl Search<'_> {
    /// The calls that may be linearized next in the configuration `done`.
    fn candidates(&self, done: &[bool]) -> Vec<usize> {
        let mut candidates = Vec::new();
        let mut min_to = Micros::MAX;
        for (j, entry) in self.entries.iter().enumerate() {
            if done[j] {
                continue;
            }
            if entry.window.from > min_to {
                break;
            }
            min_to = min_to.min(entry.window.to);
            candidates.push(j);
        }
        candidates
    }

    /// `Some(true)` linearizable, `Some(false)` not, `None` out of budget.
    fn dfs(&mut self, state: &Name, remaining: usize) -> Option<bool> {
        if remaining == 0 {
            return Some(true);
        }
        let depth = self.entries.len() - remaining;
        if depth > self.deepest || self.stuck_at.is_none() {
            self.deepest = depth;
            self.stuck_at = Some((self.done.clone(), state.clone()));
        }
        let k = key(&self.done, state);
        if self.memo.contains(&k) {
            return Some(false);
        }
        self.visited += 1;
        if self.visited > BUDGET {
            return None;
        }
        for j in self.candidates(&self.done) {
            let entry = &self.entries[j];
            let ctx = LineContext {
                line: &self.line,
                me: j,
            };
            for next in state.step(&entry.op.call, &entry.op.answer, entry.window, &ctx) {
                self.done[j] = true;
                let found = self.dfs(&next, remaining - 1);
                self.done[j] = false;
                match found {
                    Some(false) => {}
                    other => return other,
                }
            }
        }
        self.memo.insert(k);
        Some(false)
    }

    /// At the deepest configuration reached: the candidates the model
    /// refuses outright (or, if it refuses none, every candidate).
    fn stuck(&self) -> Vec<usize> {
        let Some((done, state)) = &self.stuck_at else {
            return Vec::new();
        };
        let candidates = self.candidates(done);
        let refused: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&j| {
                let ctx = LineContext {
                    line: &self.line,
                    me: j,
                };
                let e = &self.entries[j];
                state
                    .step(&e.op.call, &e.op.answer, e.window, &ctx)
                    .is_empty()
            })
            .collect();
        if refused.is_empty() {
            candidates
        } else {
            refused
        }
    }
}

/// Checks one name's calls (any order; they are sorted here), on a store
/// whose clock is exact.
pub fn check(ops: &[Op]) -> Verdict {
    check_on(ops, StoreClock::default())
}

/// Checks one name's calls on a store whose clock reads TTLs as `clock`.
pub fn check_on(ops: &[Op], clock: StoreClock) -> Verdict {
    let unknown_grants: Vec<&Op> = ops
        .iter()
        .filter(|op| {
            matches!(
                (&op.call, &op.answer),
                (Call::Acquire { .. }, Answer::Unknown)
            )
        })
        .collect();
    let mut entries: Vec<Entry<'_>> = ops
        .iter()
        .filter(|op| searched(op))
        .map(|op| Entry {
            op,
            window: window_of(op),
        })
        .collect();
    entries.sort_by_key(|e| (e.window.from, e.window.to));
    // Waiters whose answer never came stand in the line as well.
    let line = Line::of(&entries, &unknown_grants);
    let line = Line {
        waits: line
            .waits
            .into_iter()
            .chain(unknown_grants.iter().filter_map(|op| match op.call {
                Call::Acquire { wait_ms, .. } if wait_ms > 0 => Some((
                    usize::MAX,
                    Span::new(op.invoked, op.returned + PLACE_LINGER),
                )),
                _ => None,
            }))
            .collect(),
        ghosts: line.ghosts,
    };
    let n = entries.len();
    let mut search = Search {
        entries,
        line,
        done: vec![false; n],
        memo: HashSet::new(),
        visited: 0,
        deepest: 0,
        stuck_at: None,
    };
    let start = Name {
        clock,
        ..Name::default()
    };
    match search.dfs(&start, n) {
        Some(true) => Verdict::Ok {
            visited: search.visited,
        },
        Some(false) => Verdict::Violation {
            stuck: search
                .stuck()
                .iter()
                .map(|&j| index_of(ops, search.entries[j].op))
                .collect(),
            prefix: search.deepest,
        },
        None => Verdict::GaveUp {
            visited: search.visited,
        },
    }
}

fn index_of(ops: &[Op], op: &Op) -> usize {
    ops.iter()
        .position(|o| std::ptr::eq(o, op))
        .expect("an op of the history")
}

/// Runs `check` on a thread with a deep stack (the search recurses once
/// per call of the name).
pub fn check_deep(ops: Vec<Op>, clock: StoreClock) -> (Vec<Op>, Verdict) {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let verdict = check_on(&ops, clock);
            (ops, verdict)
        })
        .expect("a checker thread")
        .join()
        .expect("the checker does not panic")
}

/// Whether `op` is an event of the whole store, not of one name.
fn store_wide(op: &Op) -> bool {
    matches!(
        op.call,
        Call::Wipe | Call::ClockStep { .. } | Call::Failover
    )
}

/// Splits a history by name.
pub fn by_name(ops: &[Op]) -> HashMap<String, Vec<Op>> {
    let mut names: HashMap<String, Vec<Op>> = HashMap::new();
    for op in ops {
        if store_wide(op) {
            continue;
        }
        names.entry(op.name.clone()).or_default().push(op.clone());
    }
    // A wipe loses every name's data; a clock step moves every name's.
    for op in ops.iter().filter(|op| store_wide(op)) {
        for (name, list) in &mut names {
            let mut wipe = op.clone();
            wipe.name = name.clone();
            list.push(wipe);
        }
    }
    names
}

/// Shrinks a failing history to a smaller one that still fails at the same
/// call (`stuck`, an op of `ops`): first the shortest prefix (by
/// invocation) that fails, then dropping one lease's calls at a time (a
/// grant and every call with its token) or one other call, while it still
/// fails there. Bounded: at most `tries` checks.
pub fn minimize(ops: &[Op], stuck: &Op, tries: usize, clock: StoreClock) -> Vec<Op> {
    let fails_at = |ops: &[Op]| match check_on(ops, clock) {
        Verdict::Violation { stuck: s, .. } => s.iter().any(|&i| &ops[i] == stuck),
        _ => false,
    };
    let mut ops: Vec<Op> = ops.to_vec();
    ops.sort_by_key(|o| o.invoked);
    let mut budget = tries;
    // The calls invoked after the stuck one cannot matter to placing it
    // except by their windows: drop those invoked after it returned.
    ops.retain(|o| o.invoked <= stuck.returned);
    // Units: a grant with the calls of its token; any other call alone.
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut of_token: HashMap<u32, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let token = match (&op.call, &op.answer) {
            (_, Answer::Granted { token, .. }) => Some(*token),
            (Call::Renew { token, .. } | Call::Beat { token, .. } | Call::Release { token }, _) => {
                Some(*token)
            }
            _ => None,
        };
        match token.and_then(|t| of_token.get(&t).copied().map(|u| (t, u))) {
            Some((_, u)) => units[u].push(i),
            None => {
                if let Some(t) = token {
                    of_token.insert(t, units.len());
                }
                units.push(vec![i]);
            }
        }
    }
    let mut keep = vec![true; ops.len()];
    for unit in units.iter().rev() {
        if budget == 0 {
            break;
        }
        // The stuck call, and what was going on around it (the leases
        // alive then explain its answer): kept.
        let near = |o: &Op| o.returned >= stuck.invoked - NEAR && o.invoked <= stuck.returned;
        if unit.iter().any(|&i| &ops[i] == stuck || near(&ops[i])) {
            continue;
        }
        for &i in unit {
            keep[i] = false;
        }
        let trial: Vec<Op> = ops
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(o, _)| o.clone())
            .collect();
        budget -= 1;
        if !fails_at(&trial) {
            for &i in unit {
                keep[i] = true;
            }
        }
    }
    ops.into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(o, _)| o)
        .collect()
}

/// A history as lines, for a report.
pub fn format(ops: &[Op]) -> String {
    let mut sorted: Vec<&Op> = ops.iter().collect();
    sorted.sort_by_key(|o| o.invoked);
    sorted.iter().map(|o| format_op(o) + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::spec::{Kind, Reason};

    fn op(client: usize, call: Call, answer: Answer, invoked: Micros, returned: Micros) -> Op {
        Op {
            client,
            name: "n".into(),
            call,
            answer,
            invoked: invoked * 1000,
            returned: returned * 1000,
        }
    }
    fn acquire(ttl_ms: u64) -> Call {
        Call::Acquire {
            kind: Kind::Lock,
            ttl_ms,
            wait_ms: 0,
            lock_delay_ms: 0,
            keep_place: false,
        }
    }
    fn granted(token: u32, fence: u64, ttl_ms: u64) -> Answer {
        Answer::Granted {
            token,
            fence,
            ttl_ms,
        }
    }
    fn ok(ops: &[Op]) -> bool {
        matches!(check(ops), Verdict::Ok { .. })
    }

    #[test]
    fn two_holders_at_once_are_a_violation_and_one_after_expiry_is_not() {
        let first = op(0, acquire(1000), granted(0, 10, 1000), 0, 5);
        // Granted while the first surely still lives: impossible.
        assert!(!ok(&[
            first.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 500, 510)
        ]));
        // Granted after it surely expired: fine; with a lower fence: not.
        assert!(ok(&[
            first.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 1100, 1110)
        ]));
        assert!(!ok(&[
            first.clone(),
            op(1, acquire(1000), granted(1, 9, 1000), 1100, 1110)
        ]));
        // Around the expiry (within the windows): either may be true.
        assert!(ok(&[
            first.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 990, 1010)
        ]));
        assert!(ok(&[
            first,
            op(1, acquire(1000), Answer::Aborted, 990, 1010)
        ]));
    }

    #[test]
    fn a_try_refused_on_a_free_name_is_a_violation_unless_someone_waits() {
        assert!(!ok(&[op(0, acquire(1000), Answer::Aborted, 0, 5)]));
        let wait = Call::Acquire {
            kind: Kind::Lock,
            ttl_ms: 1000,
            wait_ms: 500,
            lock_delay_ms: 0,
            keep_place: false,
        };
        assert!(ok(&[
            op(1, wait, Answer::Unknown, 0, 1),
            op(0, acquire(1000), Answer::Aborted, 2, 5)
        ]));
    }

    #[test]
    fn renewal_extends_and_a_loss_told_for_a_live_lease_is_a_violation() {
        let g = op(0, acquire(1000), granted(0, 10, 1000), 0, 5);
        let renew = op(
            0,
            Call::Renew {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Alive {
                fence: 10,
                ttl_ms: 1000,
            },
            800,
            810,
        );
        let late = op(1, acquire(1000), granted(1, 11, 1000), 1200, 1210);
        assert!(
            !ok(&[g.clone(), renew.clone(), late]),
            "the renewal kept it past 1200"
        );
        let lie = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::Expired),
            300,
            310,
        );
        assert!(!ok(&[g.clone(), lie]));
        let truth = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::Expired),
            1300,
            1310,
        );
        assert!(ok(&[g.clone(), truth]));
        let wrong_reason = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::Revoked),
            1300,
            1310,
        );
        assert!(!ok(&[g, wrong_reason]));
    }

    #[test]
    fn release_is_compare_and_set_and_idempotent_for_its_token() {
        let g = op(0, acquire(5000), granted(0, 10, 5000), 0, 5);
        let stranger = op(1, Call::Release { token: 7 }, Answer::Released, 10, 20);
        assert!(!ok(&[g.clone(), stranger]));
        let release = op(0, Call::Release { token: 0 }, Answer::Released, 10, 20);
        let again = op(0, Call::Release { token: 0 }, Answer::Released, 30, 40);
        let next = op(1, acquire(1000), granted(1, 11, 1000), 50, 60);
        assert!(ok(&[
            g.clone(),
            release.clone(),
            again.clone(),
            next.clone()
        ]));
        let refused_again = op(0, Call::Release { token: 0 }, Answer::NotFound, 30, 40);
        assert!(!ok(&[g, release, refused_again, next]));
    }

    #[test]
    fn lock_delay_holds_the_name_after_an_expiry_not_after_a_release() {
        let delayed = Call::Acquire {
            kind: Kind::Lock,
            ttl_ms: 1000,
            wait_ms: 0,
            lock_delay_ms: 2000,
            keep_place: false,
        };
        let g = op(0, delayed, granted(0, 10, 1000), 0, 5);
        assert!(!ok(&[
            g.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 1500, 1510)
        ]));
        assert!(ok(&[
            g.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 3100, 3110)
        ]));
        let release = op(0, Call::Release { token: 0 }, Answer::Released, 10, 20);
        assert!(ok(&[
            g,
            release,
            op(1, acquire(1000), granted(1, 11, 1000), 30, 40)
        ]));
    }

    #[test]
    fn a_revoked_holder_hears_revoked_and_a_semaphore_grants_its_limit() {
        let g = op(0, acquire(5000), granted(0, 10, 5000), 0, 5);
        let revoke = op(2, Call::Revoke, Answer::Revoked { fence: 10 }, 10, 20);
        let next = op(1, acquire(1000), granted(1, 11, 1000), 30, 40);
        let told = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::Revoked),
            50,
            60,
        );
        assert!(ok(&[g.clone(), revoke.clone(), next.clone(), told]));
        let untold = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::NotOwner),
            50,
            60,
        );
        assert!(!ok(&[g, revoke, next, untold]));
        let sem = |t, f| {
            op(
                t as usize,
                Call::Acquire {
                    kind: Kind::Permit { limit: 2 },
                    ttl_ms: 5000,
                    wait_ms: 0,
                    lock_delay_ms: 0,
                    keep_place: false,
                },
                granted(t, f, 5000),
                10 * i64::from(t),
                10 * i64::from(t) + 5,
            )
        };
        assert!(ok(&[sem(0, 1), sem(1, 2)]));
        assert!(!ok(&[sem(0, 1), sem(1, 2), sem(2, 3)]));
    }

    #[test]
    fn an_unanswered_grant_may_hold_the_name_or_not() {
        let unknown = op(0, acquire(1000), Answer::Unknown, 0, 12_000);
        assert!(ok(&[
            unknown.clone(),
            op(1, acquire(1000), Answer::Aborted, 10, 20)
        ]));
        assert!(ok(&[
            unknown.clone(),
            op(1, acquire(1000), granted(1, 11, 1000), 10, 20)
        ]));
        // But not both held at once by known holders.
        let a = op(1, acquire(1000), granted(1, 11, 1000), 10, 20);
        let b = op(2, acquire(1000), granted(2, 12, 1000), 30, 40);
        assert!(!ok(&[unknown, a, b]));
    }

    #[test]
    fn clock_steps_move_expiries_and_a_step_back_may_revive() {
        let g = op(0, acquire(3000), granted(0, 10, 3000), 0, 5);
        let forward = op(
            9,
            Call::ClockStep { delta_ms: 2500 },
            Answer::Happened,
            100,
            101,
        );
        let early = op(1, acquire(1000), granted(1, 11, 1000), 700, 710);
        assert!(!ok(&[g.clone(), early.clone()]));
        assert!(
            ok(&[g.clone(), forward, early]),
            "a step forward ends the lease sooner"
        );
        let g = op(0, acquire(1000), granted(0, 10, 1000), 0, 5);
        let back = op(
            9,
            Call::ClockStep { delta_ms: -1000 },
            Answer::Happened,
            1100,
            1101,
        );
        let revived = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Alive {
                fence: 10,
                ttl_ms: 1000,
            },
            1200,
            1210,
        );
        assert!(!ok(&[g.clone(), revived.clone()]));
        assert!(
            ok(&[g.clone(), back.clone(), revived]),
            "stepped back, an expired lease may live again"
        );
        let gone = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 1000,
            },
            Answer::Lost(Reason::Expired),
            1200,
            1210,
        );
        assert!(ok(&[g, back, gone]), "or not");
    }

    #[test]
    fn a_write_within_the_deadline_under_an_expired_lease_is_a_violation() {
        let g = op(0, acquire(1000), granted(0, 10, 1000), 0, 5);
        let write = |at, believed, answer| {
            op(
                0,
                Call::Write {
                    token: 0,
                    fence: 10,
                    believed,
                },
                answer,
                at,
                at + 1,
            )
        };
        assert!(ok(&[g.clone(), write(500, true, Answer::Accepted)]));
        assert!(
            !ok(&[g.clone(), write(1500, true, Answer::Accepted)]),
            "the lease ended before the holder's deadline"
        );
        assert!(
            ok(&[g.clone(), write(1500, false, Answer::Accepted)]),
            "a paused holder's late write, no higher fence yet"
        );
        let next = op(1, acquire(1000), granted(1, 11, 1000), 1100, 1110);
        let next_write = op(
            1,
            Call::Write {
                token: 1,
                fence: 11,
                believed: true,
            },
            Answer::Accepted,
            1120,
            1121,
        );
        assert!(ok(&[
            g.clone(),
            next.clone(),
            next_write.clone(),
            write(1500, false, Answer::Refused)
        ]));
        assert!(
            !ok(&[g, next, next_write, write(1500, false, Answer::Accepted)]),
            "the resource takes no lower fence"
        );
    }

    #[test]
    fn a_step_forward_excuses_a_write_within_the_deadline() {
        let g = op(0, acquire(1000), granted(0, 10, 1000), 0, 5);
        let forward = op(
            9,
            Call::ClockStep { delta_ms: 800 },
            Answer::Happened,
            100,
            101,
        );
        let write = op(
            0,
            Call::Write {
                token: 0,
                fence: 10,
                believed: true,
            },
            Answer::Accepted,
            500,
            501,
        );
        assert!(ok(&[g.clone(), write.clone()]));
        assert!(
            ok(&[g.clone(), forward, write.clone()]),
            "the step ended the lease early: only the fence protects"
        );
        let late = op(
            0,
            Call::Write {
                token: 0,
                fence: 10,
                believed: true,
            },
            Answer::Accepted,
            1500,
            1501,
        );
        assert!(!ok(&[g, late]), "no step: the deadline was wrong");
    }

    #[test]
    fn a_renewal_without_an_answer_may_have_shortened_the_lease() {
        let g = op(0, acquire(3000), granted(0, 10, 3000), 0, 5);
        let shorter = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 700,
            },
            Answer::Unknown,
            100,
            12_100,
        );
        let next = op(1, acquire(1000), granted(1, 11, 1000), 1000, 1010);
        assert!(!ok(&[g.clone(), next.clone()]));
        assert!(
            ok(&[g, shorter, next]),
            "the unanswered heartbeat's 700 ms may have applied"
        );
    }

    #[test]
    fn a_release_without_an_answer_may_arrive_after_later_answers() {
        let g = op(0, acquire(3000), granted(0, 10, 3000), 0, 5);
        let release = op(0, Call::Release { token: 0 }, Answer::Unknown, 10, 12_010);
        let beat = op(
            0,
            Call::Beat {
                token: 0,
                ttl_ms: 3000,
            },
            Answer::Alive {
                fence: 10,
                ttl_ms: 3000,
            },
            500,
            510,
        );
        let next = op(1, acquire(1000), granted(1, 11, 1000), 600, 610);
        assert!(!ok(&[g.clone(), beat.clone(), next.clone()]));
        assert!(
            ok(&[g, release, beat, next]),
            "the held release arrived after the heartbeat"
        );
    }

    #[test]
    fn the_leader_is_the_election_lock_holder_and_its_term_the_fence() {
        let g = op(0, acquire(5000), granted(0, 10, 5000), 0, 5);
        let leader = |present, term| op(1, Call::Leader, Answer::Leader { present, term }, 10, 20);
        assert!(ok(&[g.clone(), leader(true, 10)]));
        assert!(
            !ok(&[g.clone(), leader(true, 9)]),
            "a deposed leader's term"
        );
        assert!(
            !ok(&[g, leader(false, 0)]),
            "nobody leads while the lock is held"
        );
        assert!(ok(&[leader(false, 0)]));
    }

    #[test]
    fn minimize_keeps_the_failure_and_drops_what_does_not_matter() {
        let mut ops = Vec::new();
        for i in 0..20u32 {
            let t = i64::from(i) * 2000;
            ops.push(op(
                0,
                acquire(1000),
                granted(i, 10 + u64::from(i), 1000),
                t,
                t + 5,
            ));
            ops.push(op(
                0,
                Call::Release { token: i },
                Answer::Released,
                t + 10,
                t + 20,
            ));
        }
        let bad = op(1, acquire(1000), granted(99, 5, 1000), 41_000, 41_010);
        ops.push(bad.clone());
        assert!(!ok(&ops));
        let small = minimize(&ops, &bad, 100, StoreClock::default());
        assert!(small.len() <= 3, "{}", format(&small));
        assert!(small.contains(&bad));
    }
}
