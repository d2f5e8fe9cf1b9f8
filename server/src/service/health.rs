//! Keeps the standard gRPC health status in step with the store: SERVING
//! while the store answers, NOT_SERVING while it does not, so that Kubernetes
//! probes and load balancers route around a broker that cannot reach Redis.
//!
//! The same pings watch the store's clock. Redis decides expiry by its own
//! wall clock, so a step of that clock moves every lease's end at once:
//! forward, leases expire early and a holder can be overtaken while it still
//! believes it holds (only the fence then protects the resource); backward,
//! leases outlive their TTL (by at most one more TTL: acquire.lua). Neither
//! can be undone by the broker, but it can say so: each reading of the
//! store's clock is compared with this process's monotonic clock, which no
//! NTP step moves, and a step is logged at warn and counted in
//! `leasehold_store_clock_jumps_total`.

use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tonic_health::{server::HealthReporter, ServingStatus};

use crate::{
    lease::Leases,
    metrics::{ClockJump, Metrics},
    proto,
    store::ClockReading,
};

/// The gRPC service names whose health this reports: the whole server ("")
/// and the Leasehold API.
const SERVICES: [&str; 2] = ["", proto::leasehold_service_server::SERVICE_NAME];

/// The smallest change of the store's clock, against ours, reported as a
/// step. Far above what a reading's uncertainty leaves after its round trip
/// is taken off (network jitter) and above what NTP slewing moves a clock
/// between two pings (500 ppm: 0.5 ms a second, allowed for on top), yet
/// below any lease TTL worth using: a step this size already makes a 1 s
/// lease expire at once.
pub const CLOCK_JUMP_THRESHOLD: Duration = Duration::from_secs(1);

/// The fastest a slewing clock may drift, in µs per second (NTP's limit).
const MAX_SLEW_US_PER_S: i64 = 500;

/// Pings the store every `interval` (each ping bounded by the store timeout)
/// until `stop` turns true.
pub async fn watch_store(
    leases: Leases,
    metrics: Metrics,
    reporter: HealthReporter,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Option<bool> = None;
    let mut clock = ClockWatch::new();
    loop {
        let result = tokio::select! {
            result = leases.store().ping() => result,
            _ = stop.wait_for(|s| *s) => return,
        };
        if let Ok(Some(reading)) = &result {
            let (offset, step) = clock.observe(reading);
            metrics.store_clock_offset.set(offset.as_secs_f64());
            if let Some(step) = step {
                step.log();
                metrics.store_clock_jumped(step.direction);
            }
        }
        let up = result.is_ok();
        if last != Some(up) {
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for service in SERVICES {
                reporter.set_service_status(service, status).await;
            }
            metrics.store_up.set(i64::from(up));
            match result {
                Ok(_) => tracing::info!("store reachable: serving"),
                Err(e) => tracing::warn!(error = %e, "store unreachable: not serving"),
            }
            last = Some(up);
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// A signed time difference in µs, for the offset gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Micros(i64);

impl Micros {
    fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

/// Follows the store's clock against this process's: our wall clock read
/// once at start, advanced by the monotonic clock from then on (so an NTP
/// step of the broker's own host is not taken for one of the store's).
struct ClockWatch {
    anchor: Instant,
    anchor_unix_us: i64,
    last: Option<Offset>,
}

/// What one reading tells of the store's clock minus ours: between `lo` and
/// `hi` µs (the store read its clock somewhere within the round trip).
#[derive(Clone, Copy, Debug)]
struct Offset {
    lo: i64,
    hi: i64,
    at: Instant,
}

impl Offset {
    fn mid(self) -> i64 {
        self.lo + (self.hi - self.lo) / 2
    }
}

/// A step of the store's clock between two readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    direction: ClockJump,
    /// Its size, as far as the readings tell (the change of the middle of
    /// their offsets).
    by_us: i64,
}

impl Step {
    fn log(self) {
        let ms = self.by_us.unsigned_abs() / 1_000;
        match self.direction {
            ClockJump::Forward => tracing::warn!(
                step_ms = ms,
                "the store's clock stepped forward by {ms} ms: leases it held expired up to \
                 that much early, so a holder may have been overtaken while it still believed \
                 it held its lease (its fenced writes are refused); keep the Redis host's clock \
                 slewing (NTP), not stepping"
            ),
            ClockJump::Backward => tracing::warn!(
                step_ms = ms,
                "the store's clock stepped back by {ms} ms: a lease held then may outlive \
                 its TTL by up to one more TTL (the next acquire counts its TTL from then on), \
                 and a revoked lease's lock-delay by up to the step; fences still rise; keep \
                 the Redis host's clock slewing (NTP), not stepping"
            ),
        }
    }
}

impl ClockWatch {
    fn new() -> Self {
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        ClockWatch {
            anchor: Instant::now(),
            anchor_unix_us: micros(unix),
            last: None,
        }
    }

    /// Our clock at `t`, in µs since the epoch.
    fn ours(&self, t: Instant) -> i64 {
        self.anchor_unix_us
            .saturating_add(micros(t.saturating_duration_since(self.anchor)))
    }

    /// Takes a reading: the offset it shows (store minus ours), and the step
    /// since the previous reading if one certainly happened. A step is
    /// certain when the two readings' ranges of possible offsets lie further
    /// apart than the threshold plus what slewing could have moved the clock
    /// in between: a slow round trip widens a range, so it is never taken for
    /// a step.
    fn observe(&mut self, reading: &ClockReading) -> (Micros, Option<Step>) {
        let store = i64::try_from(reading.store_unix_us).unwrap_or(i64::MAX);
        let now = Offset {
            lo: store.saturating_sub(self.ours(reading.received)),
            hi: store.saturating_sub(self.ours(reading.sent)),
            at: reading.received,
        };
        let step = self.last.and_then(|before| {
            let between = now.at.saturating_duration_since(before.at);
            let slew = i64::try_from(between.as_secs())
                .unwrap_or(i64::MAX)
                .saturating_add(1)
                .saturating_mul(MAX_SLEW_US_PER_S);
            let allowed = micros(CLOCK_JUMP_THRESHOLD).saturating_add(slew);
            let by_us = now.mid().saturating_sub(before.mid());
            if now.lo.saturating_sub(before.hi) > allowed {
                Some(Step {
                    direction: ClockJump::Forward,
                    by_us,
                })
            } else if before.lo.saturating_sub(now.hi) > allowed {
                Some(Step {
                    direction: ClockJump::Backward,
                    by_us,
                })
            } else {
                None
            }
        });
        self.last = Some(now);
        (Micros(now.mid()), step)
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch whose clock agrees with a store at offset 0 at `base`.
    fn watch_at(base: Instant) -> ClockWatch {
        ClockWatch {
            anchor: base,
            anchor_unix_us: 1_800_000_000_000_000,
            last: None,
        }
    }

    /// A reading sent at `base + sent_ms`, answered `rtt_ms` later, in which
    /// the store read its clock `read_ms` after sending and its clock was
    /// `offset_ms` ahead of ours.
    fn reading(
        base: Instant,
        sent_ms: u64,
        rtt_ms: u64,
        read_ms: u64,
        offset_ms: i64,
    ) -> ClockReading {
        let read_at =
            1_800_000_000_000_000 + (sent_ms + read_ms) as i64 * 1_000 + offset_ms * 1_000;
        ClockReading {
            store_unix_us: read_at as u64,
            sent: base + Duration::from_millis(sent_ms),
            received: base + Duration::from_millis(sent_ms + rtt_ms),
        }
    }

    #[test]
    fn a_steady_clock_is_no_step() {
        let base = Instant::now();
        let mut watch = watch_at(base);
        for i in 0..100 {
            let (offset, step) = watch.observe(&reading(base, i * 1_000, 2, 1, 3));
            assert_eq!(step, None, "reading {i}");
            assert!((offset.0 - 3_000).abs() <= 1_000, "{offset:?}");
        }
    }

    #[test]
    fn steps_forward_and_back_are_seen_once_each_with_their_size() {
        let base = Instant::now();
        let mut watch = watch_at(base);
        assert_eq!(watch.observe(&reading(base, 0, 2, 1, 0)).1, None);
        let forward = watch
            .observe(&reading(base, 1_000, 2, 1, 10_000))
            .1
            .unwrap();
        assert_eq!(forward.direction, ClockJump::Forward);
        assert!((forward.by_us - 10_000_000).abs() < 2_000, "{forward:?}");
        assert_eq!(watch.observe(&reading(base, 2_000, 2, 1, 10_000)).1, None);
        let back = watch
            .observe(&reading(base, 3_000, 2, 1, -3_590_000))
            .1
            .unwrap();
        assert_eq!(back.direction, ClockJump::Backward);
        assert!((back.by_us + 3_600_000_000).abs() < 2_000, "{back:?}");
    }

    #[test]
    fn a_slow_round_trip_is_not_a_step() {
        let base = Instant::now();
        let mut watch = watch_at(base);
        watch.observe(&reading(base, 0, 1, 0, 0));
        // The store answered only 3 s later, having read its clock just
        // before answering: the middle of the range is 1.5 s off, but the
        // clock did not move.
        assert_eq!(
            watch.observe(&reading(base, 1_000, 3_000, 2_999, 0)).1,
            None
        );
        assert_eq!(watch.observe(&reading(base, 5_000, 3_000, 1, 0)).1, None);
    }

    #[test]
    fn small_steps_and_slewing_are_not_steps() {
        let base = Instant::now();
        let mut watch = watch_at(base);
        watch.observe(&reading(base, 0, 1, 0, 0));
        assert_eq!(watch.observe(&reading(base, 1_000, 1, 0, 900)).1, None);
        // An hour without a reading (the store was down) while the clock
        // slewed 1.5 s (500 ppm allows 1.8 s): no step...
        assert_eq!(
            watch.observe(&reading(base, 3_601_000, 1, 0, 2_400)).1,
            None
        );
        // ...but 3 s within the next hour is one.
        let step = watch.observe(&reading(base, 7_201_000, 1, 0, 5_400)).1;
        assert_eq!(step.map(|s| s.direction), Some(ClockJump::Forward));
    }
}
