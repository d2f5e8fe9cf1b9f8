//! The history checker, one for every test that records grants: what each
//! client lived (when it asked, when the grant arrived, until when it relied
//! on the lease, whether it lost it and was told, what the fenced resource
//! refused), and [`check`], which asserts the lease contract on it, per lock:
//!
//! (a) fences are unique, a grant that arrived before another was requested
//!     has the lower fence (fences follow real-time grant order), and fences
//!     rise in the order the grants arrived;
//! (b) the fenced resource refused a write only from a holder that was
//!     paused past its TTL (the fence catching a stale holder), or that had
//!     learned its lease was lost when the store may lose data;
//! (c) no two clients held a lock at once by their own account: each holding
//!     interval runs from the grant's arrival to the client's last moment of
//!     belief (release sent, or loss noticed), and they must not overlap;
//! (d) no lease was lost without its holder being told before its next write.
//!
//! Where the faults a run injected explain a finding (the store lost its
//! data, Redis' clock stepped forward), [`Excuses`] say so and the finding is
//! counted apart instead of failing the run. `tests/checker.rs` drives
//! clients through faults; `contract::Run` drives workers while the Sentinel
//! and Cluster tests fail the store over; both end here.

use std::{collections::BTreeMap, time::Duration, time::Instant};

/// One lease as its client lived it.
#[derive(Clone, Debug)]
pub struct Grant {
    /// The lock's name.
    pub lock: String,
    /// Which client (worker) held it.
    pub client: usize,
    /// The fence its grant carried.
    pub fence: u64,
    /// When the Acquire was sent.
    pub requested: Instant,
    /// When its grant arrived.
    pub granted: Instant,
    /// The last moment the client believed it held the lease.
    pub until: Instant,
    /// The lease ended without a clean release.
    pub lost: bool,
    /// The client library told the holder of the loss: at a check before a
    /// write, or in the release's answer.
    pub told: bool,
    /// Told only by the release's answer (after its last write).
    pub told_at_release: bool,
    /// Writes refused by the resource: made by a holder that was paused.
    pub stale_writes_refused: u64,
    /// The client was paused (a modelled GC pause) while holding.
    pub paused: bool,
    /// When the resource first refused one of its writes.
    pub refused_at: Option<Instant>,
}

impl Grant {
    /// A grant that arrived at `granted` and was relied on until `until`,
    /// with no writes, pause or loss recorded.
    pub fn new(
        lock: &str,
        client: usize,
        fence: u64,
        requested: Instant,
        granted: Instant,
        until: Instant,
    ) -> Self {
        Grant {
            lock: lock.to_owned(),
            client,
            fence,
            requested,
            granted,
            until,
            lost: false,
            told: false,
            told_at_release: false,
            stale_writes_refused: 0,
            paused: false,
            refused_at: None,
        }
    }
}

/// A resource that accepts a write only if its fence is at least the
/// highest it has accepted (what the fencing token is for).
#[derive(Default)]
pub struct FencedResource {
    highest: u64,
    /// Writes it took.
    pub accepted: u64,
    /// Writes it refused: their fence was below one it had taken.
    pub rejected: u64,
}

impl FencedResource {
    /// Whether the write with `fence` was accepted.
    pub fn write(&mut self, fence: u64) -> bool {
        if fence < self.highest {
            self.rejected += 1;
            return false;
        }
        self.highest = fence;
        self.accepted += 1;
        true
    }
}

/// The faults a run injected that may explain a finding.
#[derive(Clone, Debug, Default)]
pub struct Excuses {
    /// Redis may lose its data: a holder then learns of its loss only at its
    /// next heartbeat (or release), and until then the fence alone keeps the
    /// resource safe. Overlaps and refused writes are allowed for leases
    /// whose holder did learn of their loss.
    pub store_may_lose: bool,
    /// Steps of Redis' clock forward, each as (just before, just after it
    /// took effect): leases alive at a step expire early, so their holders
    /// can be overtaken. Overlaps and refused writes of a lease granted
    /// before a step, overtaken after it, are counted apart as caused by the
    /// jump; the fences must still hold.
    pub clock_steps: Vec<(Instant, Instant)>,
    /// The leases' TTL: a lease renewed just before a step would have ended
    /// within a TTL of it anyway.
    pub ttl: Duration,
}

/// A check's outcome.
#[derive(Debug, Default)]
pub struct Findings {
    /// What breaks the contract, one line each.
    pub violations: Vec<String>,
    /// Overlapping holders where a step of Redis' clock cut the earlier
    /// lease short.
    pub clock_jump_overlaps: usize,
    /// Writes refused from holders overtaken that way.
    pub clock_jump_refused: u64,
}

/// Checks (a) to (d) on `grants`, lock by lock.
pub fn check(grants: &[Grant], excuses: &Excuses) -> Findings {
    let mut by_lock: BTreeMap<&str, Vec<Grant>> = BTreeMap::new();
    for g in grants {
        by_lock.entry(&g.lock).or_default().push(g.clone());
    }
    let mut findings = Findings::default();
    for (lock, mut held) in by_lock {
        held.sort_by_key(|h| h.granted);
        check_lock(lock, &held, excuses, &mut findings);
    }
    findings
}

/// Asserts that `grants` break nothing, with no fault excused.
pub fn assert_holds(grants: &[Grant]) {
    let findings = check(grants, &Excuses::default());
    assert!(
        findings.violations.is_empty(),
        "{}",
        findings.violations.join("\n")
    );
}

/// The checks on the grants of one lock, sorted by arrival.
fn check_lock(lock: &str, held: &[Grant], excuses: &Excuses, findings: &mut Findings) {
    let violations = &mut findings.violations;
    // A lease requested before a step took effect, and acted on (overtaken,
    // or refused) after it had: the step cut that lease short.
    let cut_short = |requested: Instant, after: Instant| {
        excuses
            .clock_steps
            .iter()
            .any(|&(before, effective)| requested < effective && after > before)
    };
    // Overtaken within a TTL of a step: a lease renewed just before it
    // would have ended by then anyway.
    let overtaken_by_step = |earlier: &Grant, later: &Grant| {
        excuses.clock_steps.iter().any(|&(before, effective)| {
            earlier.requested < effective
                && before < later.granted
                && later.granted < before + excuses.ttl
        })
    };
    // Either of two grants overtaken by the other at a step, whichever
    // arrived first: a grant made just before a step can reach its holder
    // after the grant that overtook it (its answer slower), with its lower
    // fence, which the resource then refuses.
    let crossed_by_step = |a: &Grant, b: &Grant| overtaken_by_step(a, b) || overtaken_by_step(b, a);
    let excused = |earlier: &Grant| excuses.store_may_lose && earlier.lost;

    // (a) unique fences, in real-time grant order: a grant that arrived
    // before another was requested has the lower fence; and, between
    // successive grants, rising in arrival order unless an excused overlap
    // (below) explains it.
    let mut fences: Vec<u64> = held.iter().map(|h| h.fence).collect();
    fences.sort_unstable();
    let before = fences.len();
    fences.dedup();
    if fences.len() != before {
        violations.push(format!(
            "(a) {lock}: {} fences were granted twice",
            before - fences.len()
        ));
    }
    let mut highest_so_far = Vec::with_capacity(held.len());
    for h in held {
        highest_so_far.push(h.fence.max(highest_so_far.last().copied().unwrap_or(0)));
    }
    for b in held {
        let earlier = held.partition_point(|a| a.granted < b.requested);
        if earlier > 0 && highest_so_far[earlier - 1] >= b.fence {
            violations.push(format!(
                "(a) {lock}: fence {} was granted after a higher or equal fence had been",
                b.fence
            ));
        }
    }
    for pair in held.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.fence <= a.fence && !excused(a) && !crossed_by_step(a, b) {
            violations.push(format!(
                "(a) {lock}: fence {} arrived after fence {}",
                b.fence, a.fence
            ));
        }
    }

    // (b) refused writes come only from paused holders (or, when the store
    // may lose data, from holders that learned their lease was lost).
    for h in held {
        let excused = h.paused || (excuses.store_may_lose && h.lost);
        let jumped = h
            .refused_at
            .is_some_and(|refused| cut_short(h.requested, refused));
        if h.stale_writes_refused > 0 && !excused && jumped {
            findings.clock_jump_refused += h.stale_writes_refused;
        } else if h.stale_writes_refused > 0 && !excused {
            violations.push(format!(
                "(b) {lock}: client {} (fence {}) had a write refused without being paused",
                h.client, h.fence
            ));
        }
    }

    // (c) holding intervals never overlap: each grant arrives after every
    // earlier holder's last moment of belief.
    let mut latest: Option<&Grant> = None;
    for h in held {
        if let Some(earlier) = latest {
            let overlap = h.granted < earlier.until && earlier.client != h.client;
            if overlap && !excused(earlier) && crossed_by_step(earlier, h) {
                findings.clock_jump_overlaps += 1;
            } else if overlap && !excused(earlier) {
                violations.push(format!(
                    "(c) {lock}: client {} (fence {}) still held it {:?} after client {} (fence {}) got it",
                    earlier.client,
                    earlier.fence,
                    earlier.until - h.granted,
                    h.client,
                    h.fence
                ));
            }
        }
        if latest.is_none_or(|l| h.until > l.until) {
            latest = Some(h);
        }
    }

    // (d) no lease lost unnoticed: every lease not released cleanly was
    // reported lost to its holder by the client library. (Acting on a lost
    // lease before being told would show in (b) or (c).)
    for h in held {
        if h.lost && !h.told {
            violations.push(format!(
                "(d) {lock}: client {} lost fence {} without being told",
                h.client, h.fence
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    /// Two clients taking turns on lock `l`: (client, fence, requested,
    /// granted, until) in ms from `base`.
    fn turns(base: Instant, grants: &[(usize, u64, u64, u64, u64)]) -> Vec<Grant> {
        grants
            .iter()
            .map(|&(client, fence, r, g, u)| {
                Grant::new("l", client, fence, at(base, r), at(base, g), at(base, u))
            })
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let base = Instant::now();
        let history = turns(
            base,
            &[(0, 1, 0, 1, 10), (1, 2, 5, 11, 20), (0, 3, 12, 21, 30)],
        );
        assert!(check(&history, &Excuses::default()).violations.is_empty());
    }

    #[test]
    fn each_rule_catches_its_fault() {
        let base = Instant::now();
        let findings = |history: &[Grant]| check(history, &Excuses::default()).violations;
        // (a) a fence granted twice, and a lower fence after a higher one.
        let twice = turns(base, &[(0, 5, 0, 1, 10), (1, 5, 11, 12, 20)]);
        assert!(findings(&twice).iter().any(|v| v.starts_with("(a)")));
        let backwards = turns(base, &[(0, 5, 0, 1, 10), (1, 4, 11, 12, 20)]);
        assert!(findings(&backwards).iter().any(|v| v.starts_with("(a)")));
        // (b) a write refused from a holder that was not paused.
        let mut refused = turns(base, &[(0, 1, 0, 1, 10)]);
        refused[0].stale_writes_refused = 1;
        assert!(findings(&refused).iter().any(|v| v.starts_with("(b)")));
        refused[0].paused = true;
        assert!(findings(&refused).is_empty());
        // (c) the second grant arrives while the first is relied on.
        let overlap = turns(base, &[(0, 1, 0, 1, 10), (1, 2, 2, 5, 20)]);
        assert!(findings(&overlap).iter().any(|v| v.starts_with("(c)")));
        // (d) lost without being told.
        let mut lost = turns(base, &[(0, 1, 0, 1, 10)]);
        lost[0].lost = true;
        assert!(findings(&lost).iter().any(|v| v.starts_with("(d)")));
    }

    #[test]
    fn locks_are_checked_apart() {
        let base = Instant::now();
        let mut history = turns(base, &[(0, 1, 0, 1, 10)]);
        history.push(Grant::new("m", 1, 2, base, at(base, 2), at(base, 10)));
        assert!(check(&history, &Excuses::default()).violations.is_empty());
    }

    #[test]
    fn excused_faults_are_counted_apart() {
        let base = Instant::now();
        let mut history = turns(base, &[(0, 1, 0, 1, 10), (1, 2, 2, 5, 20)]);
        let excuses = Excuses {
            clock_steps: vec![(at(base, 3), at(base, 4))],
            ttl: Duration::from_millis(100),
            ..Excuses::default()
        };
        let findings = check(&history, &excuses);
        assert!(findings.violations.is_empty(), "{:?}", findings.violations);
        assert_eq!(findings.clock_jump_overlaps, 1);
        // A grant made before the step whose answer arrived after the grant
        // that overtook it at the step (a slow answer): its lower fence
        // arrives second, and the two beliefs overlap; the step explains
        // both. Without the step, both are violations.
        let crossed = turns(base, &[(0, 2, 5, 6, 20), (1, 1, 0, 8, 10)]);
        let findings = check(&crossed, &excuses);
        assert!(findings.violations.is_empty(), "{:?}", findings.violations);
        assert_eq!(findings.clock_jump_overlaps, 1);
        let unexcused = check(&crossed, &Excuses::default()).violations;
        assert!(
            unexcused.iter().any(|v| v.starts_with("(a)")),
            "{unexcused:?}"
        );
        assert!(
            unexcused.iter().any(|v| v.starts_with("(c)")),
            "{unexcused:?}"
        );
        history[0].lost = true;
        history[0].told = true;
        let lossy = Excuses {
            store_may_lose: true,
            ..Excuses::default()
        };
        assert!(check(&history, &lossy).violations.is_empty());
    }
}
