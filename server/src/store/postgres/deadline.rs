//! The latest moment, by the database's clock, at which a grant may still
//! happen: the `not_after` that `acquire` and `semaphore_acquire` refuse to
//! pass (schema.sql: reply code 4, nothing written).
//!
//! Why: a statement can reach the server after the broker gave up on it (a
//! congested or retransmitting path, a queue in a proxy, a statement waiting
//! on the name's lock behind another session). Cancelling it does not help
//! there: PostgreSQL's cancel request only stops a statement that is running
//! when the cancel arrives, and one still on its way arrives later. Granted
//! then, its lock would be held by nobody for its whole TTL, and the orphan
//! cleanup (lease/orphans.rs), whose release ran first on another pooled
//! connection and found nothing, has already given up. With `not_after` set
//! to the database's time at the broker's deadline, a grant either happened
//! before the broker gave up, or never happens; the cleanup's release, sent
//! after the deadline, runs in the database later than `not_after` (it
//! takes the name's lock, so after any grant that passed the check has
//! committed) and so finds every grant the attempt will ever make.
//!
//! The broker does not know the database's clock; it knows a *reading*: a
//! value `store_us` read by the server at some moment between the broker
//! sending a statement (`sent`) and receiving its answer (`received`). At a
//! later local instant `t` the database's clock is then at least
//! `store_us + (t - received) * (1 - MAX_DRIFT)`; that lower bound, taken at
//! the deadline, is `not_after`: never later than the database's true time
//! at the deadline, so never a grant after it. It is earlier by the
//! reading's round trip and the drift margin: a grant that reaches the
//! server within the store timeout less those (a millisecond or two on a
//! LAN, readings a second old) is not refused.
//!
//! Readings come from every new connection (its setup statement, see
//! connect.rs) and from the sweep task, once a second. The newest one is
//! kept, even when an older one bounds higher: a clock stepped back would
//! otherwise have every grant refused until the old reading aged out.
//!
//! What it does not cover: the database's clock stepped *back* between a
//! reading and a late statement lets that statement pass (as an expiry by
//! that clock then runs long too); a clock stepped forward refuses grants
//! (UNAVAILABLE, the safe way) until the next reading, within a second.

use std::sync::Mutex;

use tokio::time::Instant;

/// The most the database's clock may run slower than the broker's
/// monotonic clock between a reading and a deadline: 500 ppm, the fastest
/// NTP slews a Linux clock, far above the drift of a disciplined one. Over
/// the second between two readings it takes half a millisecond off.
const MAX_DRIFT: f64 = 500e-6;

/// One reading of the database's clock.
#[derive(Clone, Copy, Debug)]
struct Reading {
    /// The database's clock, µs since the Unix epoch.
    store_us: i64,
    /// When its answer arrived.
    received: Instant,
}

/// The newest reading of the database's clock, shared by the store's
/// clones and its pool's connection setup.
#[derive(Default)]
pub(super) struct StoreClock {
    latest: Mutex<Option<Reading>>,
}

impl StoreClock {
    /// Records that the database read `store_us` before `received`.
    pub(super) fn record(&self, store_us: i64, received: Instant) {
        let mut latest = self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if latest.is_none_or(|r| r.received <= received) {
            *latest = Some(Reading { store_us, received });
        }
    }

    /// The database's time, in ms, that it has certainly reached by the
    /// local instant `deadline`: the `not_after` of a grant whose call
    /// gives up then. `None` before any reading (no bound is passed: the
    /// function then grants as it always did).
    pub(super) fn not_after_ms(&self, deadline: Instant) -> Option<i64> {
        let reading = (*self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))?;
        Some(lower_bound_us(reading, deadline).div_euclid(1_000))
    }
}

/// The database's clock at local instant `at`, at least, from `reading`.
#[expect(
    clippy::cast_possible_truncation,
    reason = "whole microseconds are wanted, and a float's `as` saturates"
)]
fn lower_bound_us(reading: Reading, at: Instant) -> i64 {
    let since = at.saturating_duration_since(reading.received);
    let counted = since.as_secs_f64() * (1.0 - MAX_DRIFT) * 1e6;
    // Saturating: a deadline centuries away cannot occur (the store timeout
    // is seconds).
    reading.store_us.saturating_add(counted as i64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn not_after_is_the_reading_plus_the_time_to_the_deadline_less_the_drift() {
        let clock = StoreClock::default();
        let now = Instant::now();
        assert_eq!(clock.not_after_ms(now), None);
        clock.record(1_000_000_000, now);
        let deadline = now + Duration::from_secs(2);
        // 2 s less 500 ppm of them: 1 ms.
        assert_eq!(clock.not_after_ms(deadline), Some(1_000_000 + 2_000 - 1));
        // A deadline before the reading's answer: the reading itself.
        assert_eq!(
            clock.not_after_ms(now - Duration::from_secs(1)),
            Some(1_000_000)
        );
    }

    #[test]
    fn the_newest_reading_wins_even_when_its_clock_went_back() {
        let clock = StoreClock::default();
        let now = Instant::now();
        clock.record(5_000_000_000, now);
        // A clock stepped back an hour: the newer reading is the truth now.
        let later = now + Duration::from_millis(10);
        clock.record(5_000_000_000 - 3_600_000_000, later);
        assert_eq!(clock.not_after_ms(later), Some(5_000_000 - 3_600_000));
        // An older reading arriving late is not taken.
        clock.record(9_000_000_000, now);
        assert_eq!(clock.not_after_ms(later), Some(5_000_000 - 3_600_000));
    }
}
