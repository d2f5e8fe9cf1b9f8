//! TTL advice: the rule of thumb "measure your heartbeat latency p99; your
//! TTL should be at least an order of magnitude larger", applied by the
//! broker to every heartbeat stream, and `ttl_auto`, the TTL it implies.
//!
//! Why an order of magnitude: a lease survives as long as one of the
//! heartbeats sent within its TTL reaches the store. A heartbeat is sent
//! every third of the TTL; if a round trip can take a tenth of the TTL,
//! the slowest heartbeat still leaves the lease most of its life, and a
//! stall of the network or of a process (a GC pause, a swap-in) twice the
//! usual worst does not lose it. Under that ratio, the tail of the latency
//! alone eats into the lease, and it is lost on a bad minute rather than a
//! bad day.
//!
//! What is measured: the round trip of a heartbeat as its sender saw it,
//! from sending to reading the answer (`last_round_trip_us`, reported in
//! the next heartbeat), network and store included. The broker cannot
//! measure the network leg of a stream on its own (gRPC gives it no
//! round-trip time), so it takes the client's word: a client that lies
//! misleads its own advice and its own `ttl_auto` only, and a report is
//! capped ([`MAX_ROUND_TRIP`]). A client that reports nothing (an older
//! client, a hand-written one) is judged by the broker's own share of each
//! round trip, the store's renewal: a lower bound, which can only warn too
//! late, never falsely.
//!
//! Memory: a fixed window of samples per stream ([`WINDOW`] of them, half a
//! kilobyte, so bounded by the stream caps that already exist) and one per
//! tenant (bounded by the credentials of the auth file). Nothing is kept
//! per lock name.

use std::time::Duration;

use super::Limits;
use crate::{
    duration::format_duration,
    error::{Error, Result},
};

/// A lease's TTL should be at least this many times the p99 of its
/// stream's heartbeat round trips.
pub const TTL_PER_ROUND_TRIP: u32 = 10;

/// Round trips kept per stream (and per tenant): the p99 is the largest but
/// one of the last 128, so one freak sample does not make the advice, and
/// two in a minute do.
pub const WINDOW: usize = 128;

/// Fewer samples than this, no advice: the first heartbeat of a stream
/// carries no report, and the first reports include the connection's
/// warm-up.
pub const MIN_SAMPLES: usize = 3;

/// The longest round trip a report is taken for: beyond it (a clock gone
/// wrong, a hostile client) the sample is this, which still asks for the
/// longest TTL any broker allows.
pub const MAX_ROUND_TRIP: Duration = Duration::from_secs(3600);

/// The last [`WINDOW`] heartbeat round trips of a stream or a tenant, in
/// microseconds (a ring; `u32` holds over an hour).
#[derive(Clone)]
pub struct RoundTrips {
    samples: [u32; WINDOW],
    /// Samples recorded, up to [`WINDOW`].
    len: usize,
    /// Where the next sample goes.
    next: usize,
}

impl Default for RoundTrips {
    fn default() -> Self {
        RoundTrips {
            samples: [0; WINDOW],
            len: 0,
            next: 0,
        }
    }
}

impl std::fmt::Debug for RoundTrips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundTrips")
            .field("len", &self.len)
            .field("p99", &self.p99())
            .finish()
    }
}

impl RoundTrips {
    /// Records one round trip (capped at [`MAX_ROUND_TRIP`]).
    pub fn record(&mut self, round_trip: Duration) {
        let micros = round_trip.min(MAX_ROUND_TRIP).as_micros();
        self.samples[self.next] = u32::try_from(micros).unwrap_or(u32::MAX);
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
    }

    /// The 99th percentile of the samples (nearest rank: the largest but
    /// one of 128, the largest of 100 or fewer); `None` under
    /// [`MIN_SAMPLES`].
    pub fn p99(&self) -> Option<Duration> {
        if self.len < MIN_SAMPLES {
            return None;
        }
        let mut sorted = self.samples;
        let sorted = &mut sorted[..self.len];
        sorted.sort_unstable();
        // Nearest rank: ceil(0.99 n), 1-based.
        let rank = (self.len * 99).div_ceil(100);
        Some(Duration::from_micros(u64::from(sorted[rank - 1])))
    }
}

/// The TTL fit for a p99 round trip: [`TTL_PER_ROUND_TRIP`] times it, at
/// least `--ttl-auto-floor`, within the broker's bounds. With nothing
/// measured, the floor.
///
/// Rounded up to a whole millisecond (TTLs travel in milliseconds): a TTL
/// rounded down would be a hair under the ratio, and advised against.
pub fn suggested_ttl(p99: Option<Duration>, limits: &Limits) -> Duration {
    let fit = p99.map_or(Duration::ZERO, |p| p.saturating_mul(TTL_PER_ROUND_TRIP));
    let fit = Duration::from_millis(
        u64::try_from(fit.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
    );
    fit.max(limits.ttl_auto_floor)
        .clamp(limits.ttl_min, limits.ttl_max)
}

/// A requested TTL in milliseconds, as the proto has it: `ttl_ms`, or with
/// `ttl_auto` the broker's suggestion (asked only then). Both set is a
/// mistake the caller hears about rather than one of them winning.
pub fn requested_ttl(
    ttl_ms: u64,
    ttl_auto: bool,
    suggestion: impl FnOnce() -> Duration,
) -> Result<u64> {
    if !ttl_auto {
        return Ok(ttl_ms);
    }
    if ttl_ms != 0 {
        return Err(Error::bad(
            "ttl_auto",
            format!(
                "both ttl_ms ({ttl_ms}) and ttl_auto are set: send ttl_ms = 0 to let the \
                 broker choose the TTL, or a ttl_ms without ttl_auto"
            ),
            vec![("ttl_ms", ttl_ms.to_string())],
        ));
    }
    Ok(u64::try_from(suggestion().as_millis()).unwrap_or(u64::MAX))
}

/// The advice on one heartbeat's leases (the proto's `TtlAdvice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advice {
    /// The stream's p99 round trip.
    pub round_trip_p99: Duration,
    /// The shortest TTL the heartbeat renewed.
    pub shortest_ttl: Duration,
    /// What `ttl_auto` gives this stream.
    pub suggested_ttl: Duration,
    /// Leases of the heartbeat with a TTL under [`TTL_PER_ROUND_TRIP`]
    /// times the p99.
    pub leases_below: u32,
}

impl Advice {
    /// The advice for leases renewed for `ttls` on a stream whose p99
    /// round trip is `p99`: `None` when every TTL is at least
    /// [`TTL_PER_ROUND_TRIP`] times it (or too little is measured).
    pub fn of(
        p99: Option<Duration>,
        ttls: impl IntoIterator<Item = Duration>,
        limits: &Limits,
    ) -> Option<Advice> {
        let p99 = p99?;
        let needed = p99.saturating_mul(TTL_PER_ROUND_TRIP);
        let mut shortest: Option<Duration> = None;
        let mut below = 0u32;
        for ttl in ttls {
            shortest = Some(shortest.map_or(ttl, |s| s.min(ttl)));
            if ttl < needed {
                below = below.saturating_add(1);
            }
        }
        (below > 0).then(|| Advice {
            round_trip_p99: p99,
            shortest_ttl: shortest.unwrap_or_default(),
            suggested_ttl: suggested_ttl(Some(p99), limits),
            leases_below: below,
        })
    }

    /// The advice for people and logs.
    pub fn message(&self) -> String {
        let p99 = format_duration(self.round_trip_p99);
        let shortest = format_duration(self.shortest_ttl);
        let suggested = format_duration(self.suggested_ttl);
        let leases = if self.leases_below == 1 {
            "1 lease here has".to_owned()
        } else {
            format!("{} leases here have", self.leases_below)
        };
        let fix = if self.suggested_ttl >= self.round_trip_p99.saturating_mul(TTL_PER_ROUND_TRIP) {
            format!("use a TTL of at least {suggested}, or ttl_auto")
        } else {
            format!(
                "even the broker's longest TTL ({suggested}, --ttl-max) is short for this \
                 latency: bring the client closer to the broker, or the broker to its store"
            )
        };
        format!(
            "heartbeats on this stream take up to {p99} (p99 of the last round trips), and \
             {leases} a TTL under {TTL_PER_ROUND_TRIP} times that (the shortest \
             {shortest}): a heartbeat slower still and the lease is lost; {fix}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn p99_needs_three_samples_then_is_the_nearest_rank() {
        let mut trips = RoundTrips::default();
        trips.record(ms(5));
        trips.record(ms(1));
        assert_eq!(trips.p99(), None);
        trips.record(ms(3));
        assert_eq!(trips.p99(), Some(ms(5)), "of 100 or fewer, the largest");
        let mut trips = RoundTrips::default();
        for i in 1..=128 {
            trips.record(ms(i));
        }
        assert_eq!(trips.p99(), Some(ms(127)), "of 128, the largest but one");
    }

    #[test]
    fn the_window_forgets_the_oldest_samples() {
        let mut trips = RoundTrips::default();
        for _ in 0..WINDOW {
            trips.record(ms(900));
        }
        for _ in 0..WINDOW {
            trips.record(ms(2));
        }
        assert_eq!(trips.p99(), Some(ms(2)));
    }

    #[test]
    fn a_report_past_an_hour_counts_as_an_hour() {
        let mut trips = RoundTrips::default();
        for _ in 0..3 {
            trips.record(Duration::from_secs(u64::MAX / 4));
        }
        assert_eq!(trips.p99(), Some(MAX_ROUND_TRIP));
        let limits = Limits::default();
        assert_eq!(suggested_ttl(trips.p99(), &limits), limits.ttl_max);
    }

    #[test]
    fn the_suggestion_is_ten_p99_within_floor_and_bounds() {
        let limits = Limits {
            ttl_min: ms(500),
            ttl_max: Duration::from_secs(60),
            ttl_auto_floor: Duration::from_secs(2),
            ..Limits::default()
        };
        assert_eq!(suggested_ttl(None, &limits), Duration::from_secs(2));
        // The bounds win over a floor outside them (a --ttl-max of 5 s
        // with the default floor of 10 s; a --ttl-min of 30 s).
        let narrow = Limits {
            ttl_max: Duration::from_secs(5),
            ttl_default: Duration::from_secs(2),
            ..Limits::default()
        };
        assert_eq!(narrow.check(), Ok(()));
        assert_eq!(suggested_ttl(None, &narrow), Duration::from_secs(5));
        let high = Limits {
            ttl_min: Duration::from_secs(30),
            ttl_default: Duration::from_secs(30),
            ..Limits::default()
        };
        assert_eq!(high.check(), Ok(()));
        assert_eq!(suggested_ttl(Some(ms(1)), &high), Duration::from_secs(30));
        assert_eq!(suggested_ttl(Some(ms(1)), &limits), Duration::from_secs(2));
        assert_eq!(suggested_ttl(Some(ms(700)), &limits), ms(7_000));
        assert_eq!(
            suggested_ttl(Some(ms(9_000)), &limits),
            Duration::from_secs(60)
        );
        // 10 x 512.3456001 ms is 5123.456010 ms: 5124 ms, not under the
        // ratio.
        let p99 = Duration::from_nanos(512_345_600 + 1);
        let ttl = suggested_ttl(Some(p99), &limits);
        assert_eq!(ttl, ms(5_124));
        assert_eq!(Advice::of(Some(p99), [ttl], &limits), None);
        let exact = ms(600);
        assert_eq!(suggested_ttl(Some(exact), &limits), ms(6_000));
        assert_eq!(Advice::of(Some(exact), [ms(6_000)], &limits), None);
    }

    #[test]
    fn advice_counts_exactly_the_leases_under_ten_p99() {
        let limits = Limits::default();
        assert_eq!(Advice::of(None, [ms(10)], &limits), None);
        assert_eq!(
            Advice::of(Some(ms(100)), [ms(1_000), ms(5_000)], &limits),
            None
        );
        let advice = Advice::of(Some(ms(100)), [ms(999), ms(5_000), ms(600)], &limits)
            .expect("two leases under 1 s");
        assert_eq!(advice.leases_below, 2);
        assert_eq!(advice.shortest_ttl, ms(600));
        assert_eq!(advice.suggested_ttl, limits.ttl_auto_floor.max(ms(1_000)));
        assert!(
            advice.message().contains("2 leases here have"),
            "{}",
            advice.message()
        );
    }

    #[test]
    fn ttl_auto_with_a_ttl_is_refused_in_the_callers_words() {
        let err = requested_ttl(5_000, true, || ms(1)).unwrap_err();
        assert!(err.to_string().contains("ttl_ms = 0"), "{err}");
        assert_eq!(requested_ttl(5_000, false, || ms(1)).unwrap(), 5_000);
        assert_eq!(requested_ttl(0, true, || ms(12_345)).unwrap(), 12_345);
    }
}
