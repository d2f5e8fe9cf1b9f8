//! Keeps the standard gRPC health status in step with the store: SERVING
//! while the store answers, NOT_SERVING while it does not, so that Kubernetes
//! probes and load balancers route around a broker that cannot reach its store.
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
//!
//! And they read the store's settings under which it may lose leases
//! (`store::safety`): each is exported (`leasehold_store_unsafe`,
//! `leasehold_store_not_durable`) and logged when it changes; while an
//! unsafe one holds and `--store-unsafe=refuse` (the default), the broker
//! is not serving: NOT_SERVING, and every call UNAVAILABLE naming the
//! setting ([`Refusal`], checked by the gate), until a ping finds it fixed.
//! A store that answers but takes no writes (a replica, a standby, a server
//! set read-only) fails its ping: NOT_SERVING and `leasehold_store_up 0`.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, RwLock,
    },
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::watch;
use tonic_health::{server::HealthReporter, ServingStatus};

use crate::{
    config::StoreUnsafe,
    error::{Error, Result},
    lease::Leases,
    metrics::{ClockJump, Metrics},
    proto,
    store::{
        safety::{Finding, Risk, Setting, Settings},
        ClockReading,
    },
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

/// Whether the broker refuses every call because the store is set up
/// unsafely (`--store-unsafe=refuse`), and why: set by [`watch_store`],
/// checked by every Leasehold call before it reaches the store. Cheap to
/// clone.
#[derive(Clone, Default)]
pub struct Refusal(Arc<RefusalState>);

#[derive(Default)]
struct RefusalState {
    /// What every call reads: one atomic load while serving.
    refusing: AtomicBool,
    /// Set once a ping has judged the store's settings (after `refusing`,
    /// so that whoever reads it set also reads the verdict).
    judged: AtomicBool,
    /// The refusal's message. A std lock: held only to copy or replace a
    /// string, never across an await.
    why: RwLock<String>,
}

impl Refusal {
    /// UNAVAILABLE, saying why, while refusing.
    pub fn check(&self) -> Result<()> {
        if !self.0.refusing.load(Ordering::Acquire) {
            return Ok(());
        }
        let why = self
            .0
            .why
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Err(Error::Unavailable(why))
    }

    /// Whether the broker may write to the store on its own account (the
    /// census): a ping has judged the store's settings, and they are not
    /// refused. Calls are refused by [`Refusal::check`]; the broker's own
    /// work waits for the first verdict too, so that it writes nothing to
    /// a store it is about to refuse.
    pub fn allows_own_writes(&self) -> bool {
        self.0.judged.load(Ordering::Acquire) && !self.0.refusing.load(Ordering::Acquire)
    }

    fn set(&self, why: Option<&str>) {
        match why {
            Some(why) => {
                *self
                    .0
                    .why
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = why.to_owned();
                self.0.refusing.store(true, Ordering::Release);
            }
            None => self.0.refusing.store(false, Ordering::Release),
        }
        self.0.judged.store(true, Ordering::Release);
    }
}

/// The refusal's message for the unsafe findings of `settings`, if any.
fn refusal_message(settings: &Settings) -> Option<String> {
    let unsafe_: Vec<String> = settings.unsafe_findings().map(Finding::explain).collect();
    if unsafe_.is_empty() {
        return None;
    }
    Some(format!(
        "the store may lose leases that are still held: {}. This broker refuses to serve \
         until that is fixed (--store-unsafe=refuse, LEASEHOLD_STORE_UNSAFE); \
         --store-unsafe=warn would serve anyway",
        unsafe_.join("; ")
    ))
}

/// What the health status says, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Serving,
    /// The store answers, takes writes, and is set up unsafely:
    /// `--store-unsafe=refuse`.
    Refused,
    /// The store does not answer, or takes no writes.
    Down,
}

/// Pings the store every `interval` (each ping bounded by the store timeout)
/// until `stop` turns true.
pub async fn watch_store(
    leases: Leases,
    metrics: Metrics,
    reporter: HealthReporter,
    interval: Duration,
    mode: StoreUnsafe,
    refusal: Refusal,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Option<State> = None;
    let mut clock = ClockWatch::new();
    let mut settings = SettingsWatch::default();
    loop {
        let result = tokio::select! {
            result = leases.store().ping() => result,
            _ = stop.wait_for(|s| *s) => return,
        };
        let mut refused = None;
        if let Ok(ping) = &result {
            if let Some(reading) = &ping.clock {
                let (offset, step) = clock.observe(reading);
                metrics.store_clock_offset.set(offset.as_secs_f64());
                if let Some(step) = step {
                    step.log();
                    metrics.store_clock_jumped(step.direction);
                }
            }
            settings.observe(&ping.settings, mode, &metrics);
            if mode == StoreUnsafe::Refuse {
                refused = refusal_message(&ping.settings);
            }
            // Before the status, so that no call slips through once
            // NOT_SERVING is said; cleared the same way.
            refusal.set(refused.as_deref());
        }
        let state = match (&result, &refused) {
            (Err(_), _) => State::Down,
            (Ok(_), Some(_)) => State::Refused,
            (Ok(_), None) => State::Serving,
        };
        if last != Some(state) {
            let status = if state == State::Serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for service in SERVICES {
                reporter.set_service_status(service, status).await;
            }
            metrics.store_up.set(i64::from(state != State::Down));
            match (&result, &refused) {
                (Err(e), _) => tracing::warn!(error = %e, "store unavailable: not serving"),
                (Ok(_), Some(why)) => tracing::error!("not serving: {why}"),
                (Ok(_), None) => tracing::info!("store reachable: serving"),
            }
            last = Some(state);
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Follows the store's settings from ping to ping: sets their metrics, and
/// logs each finding once when it appears (unsafe: at warn, or error while
/// it refuses) and once when it goes.
#[derive(Default)]
struct SettingsWatch {
    last: Settings,
}

impl SettingsWatch {
    fn observe(&mut self, now: &Settings, mode: StoreUnsafe, metrics: &Metrics) {
        for setting in Setting::ALL {
            metrics.store_setting(setting, now.has(setting));
        }
        for finding in &now.findings {
            if self.last.findings.contains(finding) {
                continue;
            }
            let setting = finding.setting.as_str();
            let value = finding.value.as_str();
            let why = finding.explain();
            match (finding.setting.risk(), mode) {
                // Said with the refusal itself (watch_store).
                (Risk::Unsafe, StoreUnsafe::Refuse) => {}
                (Risk::Unsafe, StoreUnsafe::Warn) => tracing::warn!(
                    setting,
                    value,
                    "{why}; serving anyway (--store-unsafe=warn): leases may be lost while held"
                ),
                (Risk::NotDurable, _) => tracing::info!(setting, value, "{why}"),
            }
        }
        for finding in &self.last.findings {
            if !now.has(finding.setting) {
                tracing::info!(
                    setting = finding.setting.as_str(),
                    "the store's {} is no longer {}",
                    finding.setting.as_str(),
                    finding.value
                );
            }
        }
        if now.unread != self.last.unread {
            if let Some(why) = &now.unread {
                tracing::warn!(
                    "cannot read the store's settings ({why}): an evicting or asynchronous \
                     store cannot be ruled out"
                );
            }
        }
        self.last = now.clone();
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
        let read_ms = i64::try_from(sent_ms + read_ms).expect("a test's milliseconds fit an i64");
        let read_at = 1_800_000_000_000_000 + read_ms * 1_000 + offset_ms * 1_000;
        ClockReading {
            store_unix_us: u64::try_from(read_at).expect("a test's clock is after 1970"),
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
