//! Prometheus metrics. Names follow Prometheus conventions (`_total` for
//! counters, base units in seconds). Every family is in the `leasehold_`
//! namespace, so that it cannot be mistaken for another exporter's in a
//! shared Prometheus (`store_up` could be anyone's), except the three the
//! product was known by before the namespace, kept for the dashboards and
//! alerts people wrote against them: `lease_acquired_total`,
//! `lease_lost_total` and `heartbeat_latency_seconds`. No metric carries a
//! lock name as a label: names are unbounded and would explode the series
//! count.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::{
    lease::{
        census::{Report, MAX_TENANT_LABELS, OTHER_TENANTS},
        Events, LossReason, Refusal, Scope,
    },
    store::safety::{Risk, Setting},
};

/// Why a request was refused before it reached the lease rules (the
/// `reason` label of `leasehold_rejected_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No credential, or one the broker does not know.
    Unauthenticated,
    /// A known credential without the permission the call needs.
    PermissionDenied,
    /// A tenant's or a connection's cap (leases, waiters, streams, rate).
    Cap,
    /// `--max-connections` reached: the connection was closed at once.
    Connections,
    /// `--conn-max-buffer` or `--max-buffer` reached: a message was refused
    /// before anything was buffered for it.
    Buffer,
    /// A gRPC connection closed before its first request: its TLS handshake
    /// failed, or it sent something else than the HTTP/2 preface and
    /// SETTINGS, or not all of them within `--handshake-timeout`.
    Handshake,
}

impl Rejection {
    /// Every reason, so each series exists from start-up at 0.
    pub const ALL: [Rejection; 6] = [
        Rejection::Unauthenticated,
        Rejection::PermissionDenied,
        Rejection::Cap,
        Rejection::Connections,
        Rejection::Buffer,
        Rejection::Handshake,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Unauthenticated => "unauthenticated",
            Rejection::PermissionDenied => "permission_denied",
            Rejection::Cap => "cap",
            Rejection::Connections => "connections",
            Rejection::Buffer => "buffer",
            Rejection::Handshake => "handshake",
        }
    }
}

/// Which way the store's clock stepped (the `direction` label of
/// `leasehold_store_clock_jumps_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockJump {
    /// Ahead: leases expire early, by the size of the step.
    Forward,
    /// Behind: leases outlive their TTL by the size of the step.
    Backward,
}

impl ClockJump {
    /// Both directions, so each series exists from start-up at 0.
    pub const ALL: [ClockJump; 2] = [ClockJump::Forward, ClockJump::Backward];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClockJump::Forward => "forward",
            ClockJump::Backward => "backward",
        }
    }
}

/// The broker's metrics, registered in their own registry (cheap to clone:
/// every field is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Leases granted.
    pub acquired: IntCounter,
    /// Leases released by their holder.
    pub released: IntCounter,
    /// Grants whose caller never heard of them (the store call timed out),
    /// released by the broker.
    pub orphans_released: IntCounter,
    /// Leases lost by their holder, by reason.
    pub lost: IntCounterVec,
    /// Acquire calls that did not obtain the lock (held, wait ran out).
    pub acquire_refused: IntCounter,
    /// Store round trip of a renewal.
    pub heartbeat_latency: Histogram,
    /// Heartbeats answered with TTL advice, by tenant.
    pub ttl_advice: IntCounterVec,
    /// Time an Acquire waited before its grant.
    pub acquire_wait: Histogram,
    /// Acquire calls waiting now on this replica.
    pub waiters: IntGauge,
    /// KeepAlive streams open now on this replica.
    pub keepalive_streams: IntGauge,
    /// Session streams open now on this replica.
    pub session_streams: IntGauge,
    /// Store calls that failed (timeout, connection, unexpected answer).
    pub store_errors: IntCounter,
    /// 1 while the last store health check succeeded, else 0.
    pub store_up: IntGauge,
    /// Requests and connections refused, by reason.
    pub rejected: IntCounterVec,
    /// Client connections open now on this replica.
    pub connections: IntGauge,
    /// Steps of the store's clock the health pings saw, by direction.
    pub store_clock_jumps: IntCounterVec,
    /// The store's clock minus this broker's steady clock, in seconds.
    pub store_clock_offset: Gauge,
    /// 1 per store setting under which the store may lose a lease its
    /// holder still holds, as the last health ping read it.
    pub store_unsafe: IntGaugeVec,
    /// 1 per store setting under which a crash of the store loses leases.
    pub store_not_durable: IntGaugeVec,
    /// Lock leases held now in the store, by tenant (the census).
    pub store_leases_held: IntGaugeVec,
    /// Semaphore permits held now in the store, by tenant.
    pub store_permits_held: IntGaugeVec,
    /// Callers in the store's wait lines now, by tenant.
    pub store_waiters: IntGaugeVec,
    /// 1 when the last census covered every name.
    pub census_complete: IntGauge,
    /// When the last census finished, in seconds since the Unix epoch.
    pub census_timestamp: Gauge,
    /// How long the last census took.
    pub census_duration: Gauge,
    /// 1 on the replica that takes the census.
    pub census_taker: IntGauge,
    /// `--census-interval` in seconds (0: off), so that an alert can tell
    /// a fleet where nobody takes the census from one where it is off.
    pub census_interval: Gauge,
    /// The tenant labels the last census set, to drop those of tenants
    /// that hold nothing any more.
    census_tenants: Arc<Mutex<BTreeSet<String>>>,
    /// The tenants `ttl_advice` has a series of, up to the census's cap on
    /// tenant labels (the rest count under its `(other)`).
    advised_tenants: Arc<Mutex<BTreeSet<String>>>,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let r = Registry::new();
        let m = Metrics {
            acquired: register(
                &r,
                IntCounter::new("lease_acquired_total", "Leases granted."),
            ),
            released: register(
                &r,
                IntCounter::new(
                    "leasehold_lease_released_total",
                    "Leases released by their holder.",
                ),
            ),
            orphans_released: register(
                &r,
                IntCounter::new(
                    "leasehold_orphans_released_total",
                    "Grants whose caller never heard of them (the store call failed, yet \
                     ran), released by the broker as soon as the store answered again.",
                ),
            ),
            lost: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "lease_lost_total",
                        "Leases that ended without their holder's consent, once each, by reason: \
                         expired, not_owner (expired and taken over), store_lost, revoked.",
                    ),
                    &["reason"],
                ),
            ),
            ttl_advice: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "leasehold_ttl_advice_total",
                        "Heartbeats answered with TTL advice, by tenant: a lease they renewed \
                         has a TTL under 10 times the p99 of its stream's heartbeat round \
                         trips (the holder is told, and the broker logs it once per stream).",
                    ),
                    &["tenant"],
                ),
            ),
            acquire_refused: register(
                &r,
                IntCounter::new(
                    "leasehold_lease_acquire_refused_total",
                    "Acquire calls that did not obtain the lock (held, or the wait ran out).",
                ),
            ),
            heartbeat_latency: register(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "heartbeat_latency_seconds",
                        "Store round trip of a lease renewal (one per heartbeat, whatever \
                         the number of leases it renews).",
                    )
                    .buckets(vec![
                        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0,
                    ]),
                ),
            ),
            acquire_wait: register(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "leasehold_lease_acquire_wait_seconds",
                        "Time from Acquire to grant (0 when the lock was free).",
                    )
                    .buckets(vec![
                        0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0,
                    ]),
                ),
            ),
            waiters: register(
                &r,
                IntGauge::new(
                    "leasehold_lease_waiters",
                    "Acquire calls waiting now on this replica.",
                ),
            ),
            keepalive_streams: register(
                &r,
                IntGauge::new(
                    "leasehold_keepalive_streams",
                    "KeepAlive streams open now on this replica.",
                ),
            ),
            session_streams: register(
                &r,
                IntGauge::new(
                    "leasehold_session_streams",
                    "Session streams open now on this replica.",
                ),
            ),
            store_errors: register(
                &r,
                IntCounter::new(
                    "leasehold_store_errors_total",
                    "Store calls that failed (timeout, connection error, unexpected answer).",
                ),
            ),
            store_up: register(
                &r,
                IntGauge::new(
                    "leasehold_store_up",
                    "1 while the last store health check succeeded, else 0.",
                ),
            ),
            rejected: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "leasehold_rejected_total",
                        "Requests refused before the lease rules (unauthenticated, \
                         permission_denied, cap: a tenant or connection limit; buffer: \
                         --conn-max-buffer or --max-buffer), connections closed at \
                         --max-connections (connections), and \
                         connections closed before their first request: a failed TLS \
                         handshake, not HTTP/2, or no preface and SETTINGS within \
                         --handshake-timeout (handshake).",
                    ),
                    &["reason"],
                ),
            ),
            connections: register(
                &r,
                IntGauge::new(
                    "leasehold_connections",
                    "Client connections open now on this replica (gRPC port).",
                ),
            ),
            store_clock_jumps: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "leasehold_store_clock_jumps_total",
                        "Steps of the store's (Redis') clock of more than 1 s, seen by the \
                         health pings against this broker's monotonic clock: forward (leases \
                         expire early), backward (leases outlive their TTL).",
                    ),
                    &["direction"],
                ),
            ),
            store_clock_offset: register(
                &r,
                Gauge::new(
                    "leasehold_store_clock_offset_seconds",
                    "The store's clock minus this broker's (its wall clock at start, advanced \
                     by its monotonic clock), at the last health ping; 0 for the memory store.",
                ),
            ),
            store_unsafe: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "leasehold_store_unsafe",
                        "1 while the store is set up so that it may lose a lease its holder \
                         still holds (a lock granted twice), by setting: maxmemory-policy \
                         (Redis evicting keys), synchronous_commit (PostgreSQL committing \
                         asynchronously); as the last health ping read it. With \
                         --store-unsafe=refuse the broker is not serving meanwhile.",
                    ),
                    &["setting"],
                ),
            ),
            store_not_durable: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "leasehold_store_not_durable",
                        "1 while a crash of the store (or its host) would lose every lease \
                         (holders are told; fences stay monotonic), by setting: appendonly \
                         (Redis without an append-only file), fsync (PostgreSQL with fsync off).",
                    ),
                    &["setting"],
                ),
            ),
            store_leases_held: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "leasehold_store_leases_held",
                        "Lock leases held now in the store, by tenant, as the last census \
                         counted them: the same fleet-wide number on every replica (aggregate \
                         with max, not sum).",
                    ),
                    &["tenant"],
                ),
            ),
            store_permits_held: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "leasehold_store_permits_held",
                        "Semaphore permits held now in the store, by tenant (the last census; \
                         aggregate with max).",
                    ),
                    &["tenant"],
                ),
            ),
            store_waiters: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "leasehold_store_waiters",
                        "Callers queued now in the store's wait lines, on every replica, by \
                         tenant (the last census; aggregate with max).",
                    ),
                    &["tenant"],
                ),
            ),
            census_complete: register(
                &r,
                IntGauge::new(
                    "leasehold_census_complete",
                    "1 when the last census of the store covered every name; 0 when it \
                     stopped at --census-max-names (the leasehold_store_* counts are partial).",
                ),
            ),
            census_timestamp: register(
                &r,
                Gauge::new(
                    "leasehold_census_timestamp_seconds",
                    "When the last census of the store finished, in seconds since the Unix \
                     epoch (0 before the first).",
                ),
            ),
            census_duration: register(
                &r,
                Gauge::new(
                    "leasehold_census_duration_seconds",
                    "How long the last census of the store took.",
                ),
            ),
            census_taker: register(
                &r,
                IntGauge::new(
                    "leasehold_census_taker",
                    "1 on the one replica that takes the census of the store (it holds the \
                     taker's lease) and serves the leasehold_store_* gauges; 0 elsewhere.",
                ),
            ),
            census_interval: register(
                &r,
                Gauge::new(
                    "leasehold_census_interval_seconds",
                    "--census-interval in seconds: how often the census taker counts the \
                     store; 0 when the census is off.",
                ),
            ),
            census_tenants: Arc::default(),
            // @root is served from the start (below), so it counts
            // against the cap from the start.
            advised_tenants: Arc::new(Mutex::new(BTreeSet::from([
                crate::lease::ROOT_TENANT.to_owned()
            ]))),
            registry: r,
        };
        register_build_info(&m.registry);
        register_process_collector(&m.registry);
        for reason in LossReason::ALL {
            m.lost.with_label_values(&[reason.as_str()]);
        }
        // Served from the start (a rate needs its 0), for the root
        // namespace; a tenant's series appears at its first advice.
        m.ttl_advice.with_label_values(&[crate::lease::ROOT_TENANT]);
        for reason in Rejection::ALL {
            m.rejected.with_label_values(&[reason.as_str()]);
        }
        for direction in ClockJump::ALL {
            m.store_clock_jumps.with_label_values(&[direction.as_str()]);
        }
        for setting in Setting::ALL {
            m.store_setting(setting, false);
        }
        m
    }

    /// Sets the series of a store `setting`: 1 if `found` (unsafe, or not
    /// durable, as the setting risks), else 0.
    pub fn store_setting(&self, setting: Setting, found: bool) {
        let family = match setting.risk() {
            Risk::Unsafe => &self.store_unsafe,
            Risk::NotDurable => &self.store_not_durable,
        };
        family
            .with_label_values(&[setting.as_str()])
            .set(i64::from(found));
    }

    /// Publishes what this replica's census role did: a census's counts
    /// by tenant (the series of a tenant that holds nothing any more are
    /// dropped, as kube-state-metrics drops a deleted object's, so that
    /// the series follow the tenants that hold something), or, on a replica
    /// that does not take the census, none at all: no stale counts for a
    /// dashboard's `max` to pick, and a timestamp of 0, which the staleness
    /// alert leaves alone.
    pub fn census(&self, report: Report<'_>) {
        let mut labelled = self
            .census_tenants
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tenants: BTreeSet<String> = match report {
            Report::Took(census) => census.tenants.keys().cloned().collect(),
            Report::NotTaker => BTreeSet::new(),
        };
        for gone in labelled.difference(&tenants) {
            for family in [
                &self.store_leases_held,
                &self.store_permits_held,
                &self.store_waiters,
            ] {
                let _ = family.remove_label_values(&[gone.as_str()]);
            }
        }
        *labelled = tenants;
        let Report::Took(census) = report else {
            self.census_taker.set(0);
            self.census_complete.set(0);
            self.census_duration.set(0.0);
            self.census_timestamp.set(0.0);
            return;
        };
        for (tenant, counts) in &census.tenants {
            let set = |family: &IntGaugeVec, n: u64| {
                family
                    .with_label_values(&[tenant.as_str()])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            };
            set(&self.store_leases_held, counts.leases);
            set(&self.store_permits_held, counts.permits);
            set(&self.store_waiters, counts.waiters);
        }
        self.census_taker.set(1);
        self.census_complete.set(i64::from(census.complete));
        self.census_duration.set(census.took.as_secs_f64());
        self.census_timestamp.set(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
    }

    /// Counts a refused request or connection.
    pub fn rejected(&self, reason: Rejection) {
        self.rejected.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts a step of the store's clock.
    pub fn store_clock_jumped(&self, direction: ClockJump) {
        self.store_clock_jumps
            .with_label_values(&[direction.as_str()])
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// `leasehold_build_info`: 1, with the version and compiler as labels, so
/// that a dashboard or an alert can tell which build each replica runs
/// (during a rollout, or to join a regression to a release). The git commit
/// is left out: a container build has no `.git`, and a dev build's would go
/// stale between commits without a rebuild.
fn register_build_info(registry: &Registry) {
    let info = register(
        registry,
        IntGaugeVec::new(
            Opts::new(
                "leasehold_build_info",
                "1, labelled with the broker's version and the rustc that built it.",
            ),
            &["version", "rustc_version"],
        ),
    );
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), env!("LEASEHOLD_RUSTC_VERSION")])
        .set(1);
}

/// The standard `process_*` families (CPU seconds, resident and virtual
/// memory, open and maximum file descriptors, threads, start time), read
/// from /proc at each scrape: what a leak or an fd exhaustion shows first,
/// under the names every Prometheus user already queries. Linux only: the
/// prometheus crate reads them through procfs.
#[cfg(target_os = "linux")]
fn register_process_collector(registry: &Registry) {
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process metric names are unique");
}

/// Elsewhere there is no /proc to read: no `process_*` families.
#[cfg(not(target_os = "linux"))]
fn register_process_collector(_: &Registry) {}

/// Registers a metric built from constant definitions: failure is a bug in
/// this file (a bad or repeated name), caught by every test that starts a
/// broker, never a runtime condition.
fn register<M>(registry: &Registry, metric: prometheus::Result<M>) -> M
where
    M: prometheus::core::Collector + Clone + 'static,
{
    let metric = metric.expect("metric definitions are valid");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What each event of the lease rules does to the metrics.
impl Events for Metrics {
    fn acquired(&self, waited: Duration) {
        self.acquired.inc();
        self.acquire_wait.observe(waited.as_secs_f64());
    }

    fn acquire_refused(&self) {
        self.acquire_refused.inc();
    }

    fn released(&self) {
        self.released.inc();
    }

    fn orphan_released(&self) {
        self.orphans_released.inc();
    }

    fn lost(&self, reason: LossReason) {
        self.lost.with_label_values(&[reason.as_str()]).inc();
    }

    fn renewed(&self, latency: Duration) {
        self.heartbeat_latency.observe(latency.as_secs_f64());
    }

    fn ttl_advised(&self, tenant: &str) {
        // Tenants are an auth file's, bounded in practice; bounded here
        // whatever the file holds, as the census bounds its labels.
        let label = {
            let mut labelled = self
                .advised_tenants
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if labelled.contains(tenant) || labelled.len() < MAX_TENANT_LABELS {
                if !labelled.contains(tenant) {
                    labelled.insert(tenant.to_owned());
                }
                tenant
            } else {
                OTHER_TENANTS
            }
        };
        self.ttl_advice.with_label_values(&[label]).inc();
    }

    fn store_failed(&self) {
        self.store_errors.inc();
    }

    fn waiting(&self, more: bool) {
        if more {
            self.waiters.inc();
        } else {
            self.waiters.dec();
        }
    }

    fn stream(&self, scope: Scope, more: bool) {
        let gauge = match scope {
            Scope::Named => &self.keepalive_streams,
            Scope::Held => &self.session_streams,
        };
        if more {
            gauge.inc();
        } else {
            gauge.dec();
        }
    }

    fn refused(&self, why: Refusal) {
        self.rejected(match why {
            Refusal::PermissionDenied => Rejection::PermissionDenied,
            Refusal::Cap => Rejection::Cap,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TTL advice is counted by tenant, every advised heartbeat once, and
    /// past the census's cap on tenant labels under `(other)`: the series
    /// stay bounded whatever the auth file holds.
    #[test]
    fn ttl_advice_counts_by_tenant_within_the_label_cap() {
        let m = Metrics::new();
        for i in 0..MAX_TENANT_LABELS + 5 {
            m.ttl_advised(&format!("t{i}"));
        }
        m.ttl_advised("t0");
        m.ttl_advised(&format!("t{}", MAX_TENANT_LABELS + 1));
        let text = m.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("leasehold_ttl_advice_total{"))
            .collect();
        // The cap (@root's 0, served from the start, among them), and
        // (other): t0 to t998 have their own, the 6 others and t1001's
        // second advice are (other)'s.
        assert_eq!(series.len(), MAX_TENANT_LABELS + 1);
        assert!(text.contains("leasehold_ttl_advice_total{tenant=\"t0\"} 2"));
        assert!(text.contains("leasehold_ttl_advice_total{tenant=\"(other)\"} 7"));
        assert!(text.contains("leasehold_ttl_advice_total{tenant=\"@root\"} 0"));
        m.ttl_advised(crate::lease::ROOT_TENANT);
        assert!(m
            .render()
            .contains("leasehold_ttl_advice_total{tenant=\"@root\"} 1"));
    }

    #[test]
    fn every_loss_reason_is_exported_from_the_start() {
        let text = Metrics::new().render();
        for reason in LossReason::ALL {
            let series = format!("lease_lost_total{{reason=\"{}\"}} 0", reason.as_str());
            assert!(text.contains(&series), "missing {series} in\n{text}");
        }
        assert!(text.contains("lease_acquired_total 0"));
        assert!(text.contains("leasehold_ttl_advice_total{tenant=\"@root\"} 0"));
        for direction in ClockJump::ALL {
            let series = format!(
                "leasehold_store_clock_jumps_total{{direction=\"{}\"}} 0",
                direction.as_str()
            );
            assert!(text.contains(&series), "missing {series} in\n{text}");
        }
        assert!(text.contains("# TYPE heartbeat_latency_seconds histogram"));
        for series in [
            "leasehold_store_unsafe{setting=\"maxmemory-policy\"} 0",
            "leasehold_store_unsafe{setting=\"synchronous_commit\"} 0",
            "leasehold_store_not_durable{setting=\"appendonly\"} 0",
            "leasehold_store_not_durable{setting=\"fsync\"} 0",
        ] {
            assert!(text.contains(series), "missing {series} in\n{text}");
        }
    }

    #[test]
    fn build_info_names_this_version() {
        let text = Metrics::new().render();
        let line = text
            .lines()
            .find(|l| l.starts_with("leasehold_build_info{"))
            .unwrap_or_else(|| panic!("no leasehold_build_info in\n{text}"));
        assert!(line.ends_with("} 1"), "{line}");
        assert!(
            line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
            "{line}"
        );
        assert!(line.contains("rustc_version=\"1."), "{line}");
    }

    /// Namespaced: only the three historical names are outside `leasehold_`
    /// (and the standard `process_*` families).
    #[test]
    fn every_family_is_namespaced() {
        let text = Metrics::new().render();
        let outside: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| {
                !name.starts_with("leasehold_")
                    && !name.starts_with("process_")
                    && ![
                        "lease_acquired_total",
                        "lease_lost_total",
                        "heartbeat_latency_seconds",
                    ]
                    .contains(name)
            })
            .collect();
        assert!(outside.is_empty(), "outside the namespace: {outside:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_are_served() {
        let text = Metrics::new().render();
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "missing {family} in\n{text}"
            );
        }
    }
}
