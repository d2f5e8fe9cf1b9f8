//! Configuration: every setting is a command-line flag with an environment
//! variable of the same name (`--store` / `LEASEHOLD_STORE`), so the same
//! binary is configured the same way on a laptop and in a Kubernetes pod.

use crate::duration::{format_duration, parse_duration};
use std::{net::SocketAddr, path::PathBuf, time::Duration};

pub use crate::lease::Limits;

/// How the broker serves: addresses, store, timeouts, limits, logs.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeConfig {
    /// Address of the gRPC API (Leasehold, health, reflection).
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:7420")]
    pub listen: SocketAddr,

    /// Address of the HTTP endpoint serving Prometheus metrics at /metrics.
    #[arg(
        long,
        env = "LEASEHOLD_METRICS_LISTEN",
        default_value = "127.0.0.1:7421"
    )]
    pub metrics_listen: SocketAddr,

    /// Most connections open at once on the metrics port; past it, a new
    /// connection is closed at once. Prometheus needs one or two.
    #[arg(long, env = "LEASEHOLD_METRICS_MAX_CONNECTIONS", default_value_t = 64)]
    pub metrics_max_connections: usize,

    /// How long a connection to the metrics port may take to send a
    /// request's headers (or wait between requests), and may leave the
    /// answer unread, before it is closed.
    #[arg(long, env = "LEASEHOLD_METRICS_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub metrics_timeout: Duration,

    /// Address of the HTTP/JSON API (POST /v1/acquire, /v1/renew...: the
    /// unary calls with their messages in the proto3 JSON mapping, for
    /// curl and programs without gRPC) and of the status page (/). Off
    /// unless given: no port is opened that nobody asked for. It has the
    /// gRPC port's TLS (--tls-cert...), authentication, tenants, caps and
    /// limits, and --max-connections and --handshake-timeout of its own.
    #[arg(long, env = "LEASEHOLD_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,

    /// How long a connection to the HTTP/JSON API may take to send its
    /// first bytes, a request's headers (or wait between requests), and
    /// then its body, and may leave an answer unread, before it is closed:
    /// a client that trickles a request, or never reads, holds its socket
    /// for that long and no more.
    #[arg(long, env = "LEASEHOLD_HTTP_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_timeout: Duration,

    /// Where leases live: `memory` (embedded, this process only) or Redis,
    /// shared by every replica: `redis://127.0.0.1:6379/0`,
    /// `redis+sentinel://s1:26379,s2:26379/mymaster` (the primary the
    /// sentinels name, followed across failovers) or
    /// `redis+cluster://n1:7000,n2:7000` (seed nodes); `rediss...` for TLS;
    /// or PostgreSQL, shared the same way:
    /// `postgres://user:password@host:5432/db` (`postgresql://` too;
    /// `sslmode=require`, `verify-ca` or `verify-full` for TLS, each
    /// verifying the server against --store-ca or the system's roots). On
    /// PostgreSQL the broker creates its schema on first use unless
    /// `leasehold migrate` made it already. Or etcd:
    /// `etcd://user:password@e1:2379,e2:2379` (`etcds://` for TLS); or
    /// ZooKeeper: `zookeeper://user:password@z1:2181,z2:2181/chroot`
    /// (`zookeepers://` for TLS; its servers with TTL nodes on:
    /// -Dzookeeper.extendedTypesEnabled=true).
    #[arg(
        long,
        env = "LEASEHOLD_STORE",
        default_value = "memory",
        hide_env_values = true
    )]
    pub store: String,

    /// Prefix of every Redis key and channel the broker uses, so that several
    /// deployments can share one Redis. On PostgreSQL it names the schema
    /// instead: lowercased, other characters than letters, digits and `_`
    /// made `_`, outer `_` dropped (`leasehold:` -> schema `leasehold`).
    #[arg(long, env = "LEASEHOLD_KEY_PREFIX", default_value = "leasehold:")]
    pub key_prefix: String,

    /// How long a store call may take before the request fails with
    /// UNAVAILABLE (e.g. `1s`, `500ms`).
    #[arg(long, env = "LEASEHOLD_STORE_TIMEOUT", default_value = "1s", value_parser = parse_duration)]
    pub store_timeout: Duration,

    /// Redis replicas that must acknowledge every grant and renewal (Redis
    /// WAIT) before it counts, so that a failover to a replica cannot hand
    /// out a fence again or forget a renewal. 0 (the default) waits for none.
    #[arg(long, env = "LEASEHOLD_REPLICA_ACKS", default_value_t = 0)]
    pub replica_acks: u32,

    /// How long to wait for those acknowledgements; past it the call fails
    /// with UNAVAILABLE. Must be below --store-timeout.
    #[arg(long, env = "LEASEHOLD_REPLICA_ACK_TIMEOUT", default_value = "500ms", value_parser = parse_duration)]
    pub replica_ack_timeout: Duration,

    /// The format of the lease records written to a Redis store: 2 (the
    /// default) writes each lease as one string, with its expiry, in one
    /// command; 1 writes the hash every broker before format 2 wrote. Both
    /// are always read. Brokers before format 2 cannot read it: while any
    /// of them serves the same Redis (a rolling update from one), run the
    /// new ones with 1, then restart them without it (docs/operations.md,
    /// "Upgrading").
    #[arg(long, env = "LEASEHOLD_REDIS_RECORD_FORMAT", default_value_t = 2,
          value_parser = clap::value_parser!(u8).range(1..=2))]
    pub redis_record_format: u8,

    /// Pooled connections each broker opens to a PostgreSQL store (one more
    /// for LISTEN). A store call holds one for one short statement, so a few
    /// serve thousands of calls a second; raise it for many concurrent
    /// callers against a database far away, keeping replicas x (N + 1)
    /// under the server's max_connections. Redis stores multiplex one
    /// connection and ignore it.
    #[arg(long, env = "LEASEHOLD_STORE_CONNECTIONS", default_value_t = 16)]
    pub store_connections: usize,

    /// How often the store is pinged to keep the health status current.
    #[arg(long, env = "LEASEHOLD_HEALTH_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub health_interval: Duration,

    /// How often the census counts what the store holds (leases, permits
    /// and waiters by tenant, for the `leasehold_store_*` gauges): a walk
    /// over every name, one bounded page at a time, by one replica for
    /// all (the holder of the census taker's lease in the store), which
    /// alone serves the counts (aggregate with `max`). 0 turns it off.
    #[arg(long, env = "LEASEHOLD_CENSUS_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub census_interval: Duration,

    /// The most names with something on them one census counts, in at
    /// most four pages of 1000 per 1000 of them: past either the census
    /// stops, its counts are partial and `leasehold_census_complete` is 0.
    /// Bounds the census's cost on a store of very many names.
    #[arg(long, env = "LEASEHOLD_CENSUS_MAX_NAMES", default_value_t = 100_000)]
    pub census_max_names: usize,

    /// What to do while the store is set up so that it may lose a lease
    /// its holder still holds (Redis evicting keys: `maxmemory` set and a
    /// `maxmemory-policy` other than `noeviction`; PostgreSQL committing
    /// asynchronously: `synchronous_commit = off`), as read at start and at
    /// every health ping: `refuse` reports NOT_SERVING and fails every call
    /// UNAVAILABLE, naming the setting, until it is fixed (no restart
    /// needed); `warn` serves, and says so in the log and in
    /// `leasehold_store_unsafe`. Settings that lose leases only at a crash
    /// of the store (no append-only file, `fsync = off`) are reported,
    /// never refused.
    #[arg(long, env = "LEASEHOLD_STORE_UNSAFE", value_enum, default_value_t = StoreUnsafe::Refuse)]
    pub store_unsafe: StoreUnsafe,

    /// Without --auth-file: allow the Revoke RPC, which ends anyone's lease,
    /// to every caller. Off by default, since anyone who reaches the port
    /// could use it. With --auth-file, Revoke needs the `admin` permission.
    #[arg(long, env = "LEASEHOLD_ENABLE_REVOKE")]
    pub enable_revoke: bool,

    /// Credentials and tenants, one per line: `<tenant> <permissions>
    /// <credential>`, the credential being `token:sha256:<hex>` (a bearer
    /// token's hash: see `leasehold token`), `cert:<name>` (a client
    /// certificate's CN or DNS/URI SAN) or `anonymous`. With it, every call
    /// needs a credential (unless an `anonymous` line names a tenant), and
    /// each tenant has its own lock names; the tenant `@root` has the lock
    /// names of callers without --auth-file (map existing callers to it to
    /// keep their locks). Reloaded when changed or on SIGHUP.
    #[arg(long, env = "LEASEHOLD_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,

    /// How often the TLS and auth files are checked for changes (and
    /// reloaded when changed), besides on SIGHUP; 0s turns the check off.
    #[arg(long, env = "LEASEHOLD_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub reload_interval: Duration,

    /// Most client connections open at once on the gRPC port; past it, new
    /// connections are closed at once.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// How long a new connection may take to finish its TLS handshake (with
    /// TLS) and send the HTTP/2 preface and its first SETTINGS frame before
    /// it is closed.
    #[arg(long, env = "LEASEHOLD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// How long a connection may go without a request, data or ping answer
    /// from its client before the broker sends it an HTTP/2 ping: finds
    /// clients that vanished without closing (a partition, a host gone).
    #[arg(long, env = "LEASEHOLD_PING_INTERVAL", default_value = "20s", value_parser = parse_duration)]
    pub ping_interval: Duration,

    /// How long a ping may go unanswered before the connection is closed
    /// (its streams end, its slot under --max-connections frees up).
    #[arg(long, env = "LEASEHOLD_PING_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub ping_timeout: Duration,

    /// Most HTTP/2 streams (calls in flight) one connection may have open at
    /// once, and requests in flight on one Session stream; more wait in the
    /// client.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_CONCURRENT_STREAMS",
        default_value_t = 1_000
    )]
    pub max_concurrent_streams: u32,

    /// Largest gRPC message accepted or sent, in bytes. The largest real
    /// request is a heartbeat naming --max-stream-leases leases: 1,000 with
    /// 256-byte names take 308 KB, so 1 MiB leaves room while bounding what
    /// one call can make the broker buffer.
    #[arg(long, env = "LEASEHOLD_MAX_MESSAGE_SIZE", default_value_t = 1024 * 1024)]
    pub max_message_size: usize,

    /// Most bytes of unfinished requests (messages announced and not yet
    /// received in full) one connection may make the broker buffer; past
    /// it the call that would exceed it fails with RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_CONN_MAX_BUFFER", default_value_t = 8 * 1024 * 1024)]
    pub conn_max_buffer: usize,

    /// Most bytes of unfinished requests all connections together may make
    /// the broker buffer; past it calls fail with RESOURCE_EXHAUSTED. Keep
    /// it well under the broker's memory limit.
    #[arg(long, env = "LEASEHOLD_MAX_BUFFER", default_value_t = 64 * 1024 * 1024)]
    pub max_buffer: usize,

    /// Threads that run requests. 0 (the default) picks: one thread on a
    /// machine (or a container's CPU quota) of two cores or fewer, where it
    /// measured fastest and cheapest per request (BENCHMARKS.md, "Session
    /// stream"), else one per core. 1 runs everything on one thread, with no
    /// hand-offs between threads; more spread the load over more cores.
    #[arg(long, env = "LEASEHOLD_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Server certificate chain (PEM, leaf first) for TLS on the gRPC port,
    /// with --tls-key. Without it the port speaks plaintext. Reloaded when
    /// changed or on SIGHUP.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM) that clients' certificates must chain to: makes
    /// TLS mutual (a client without such a certificate cannot connect).
    /// Reloaded when changed or on SIGHUP.
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// CA certificates (PEM) that a `rediss://`, `etcds://` or
    /// `zookeepers://` store's certificate (or a PostgreSQL store's, with a
    /// verifying `sslmode`) must chain to, instead of the system's roots.
    #[arg(long, env = "LEASEHOLD_STORE_CA")]
    pub store_ca: Option<PathBuf>,

    /// Client certificate (PEM) for a `rediss://` store that requires one
    /// (Redis's `tls-auth-clients`), an `etcds://` or `zookeepers://` one
    /// that does, or a PostgreSQL store over TLS that asks for one, with
    /// --store-client-key.
    #[arg(
        long,
        env = "LEASEHOLD_STORE_CLIENT_CERT",
        requires = "store_client_key"
    )]
    pub store_client_cert: Option<PathBuf>,

    /// Private key (PEM) of --store-client-cert.
    #[arg(
        long,
        env = "LEASEHOLD_STORE_CLIENT_KEY",
        requires = "store_client_cert"
    )]
    pub store_client_key: Option<PathBuf>,

    /// Request limits.
    #[command(flatten)]
    pub limits: LimitFlags,

    /// Log format: `pretty` for people, `json` for log pipelines. The level
    /// is set with `RUST_LOG` (default `info`).
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,

    /// Log every grant, release, loss and revoke at INFO (target
    /// `leasehold::audit`: the lock, the fence, the holder label, never the
    /// owner token); `false` quiets them.
    #[arg(long, env = "LEASEHOLD_AUDIT_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    pub audit_log: bool,
}

/// What the broker does while the store is set up unsafely
/// (`--store-unsafe`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreUnsafe {
    /// Not serving (health NOT_SERVING, calls UNAVAILABLE) until it is fixed.
    Refuse,
    /// Serving, with a warning in the log and the metric at 1.
    Warn,
}

/// Log output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// The flags of the request limits ([`Limits`], the lease rules' own
/// struct): each field is the limit of the same name.
#[derive(clap::Args, Clone, Debug)]
pub struct LimitFlags {
    /// Shortest lease a client may ask for.
    #[arg(long, env = "LEASEHOLD_TTL_MIN", default_value = "500ms", value_parser = parse_duration)]
    pub ttl_min: Duration,

    /// Longest lease a client may ask for.
    #[arg(long, env = "LEASEHOLD_TTL_MAX", default_value = "1h", value_parser = parse_duration)]
    pub ttl_max: Duration,

    /// Lease TTL when a request gives none (ttl_ms = 0).
    #[arg(long, env = "LEASEHOLD_TTL_DEFAULT", default_value = "10s", value_parser = parse_duration)]
    pub ttl_default: Duration,

    /// Shortest TTL a `ttl_auto` request gets (10 times the p99 of the
    /// measured heartbeat round trips, at least this; the result is kept
    /// within --ttl-min and --ttl-max, which win over this floor).
    #[arg(long, env = "LEASEHOLD_TTL_AUTO_FLOOR", default_value = "10s", value_parser = parse_duration)]
    pub ttl_auto_floor: Duration,

    /// Longest an Acquire may wait for a held lock.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT", default_value = "5m", value_parser = parse_duration)]
    pub max_wait: Duration,

    /// Longest lock-delay an Acquire may ask for.
    #[arg(long, env = "LEASEHOLD_MAX_LOCK_DELAY", default_value = "1m", value_parser = parse_duration)]
    pub max_lock_delay: Duration,

    /// Most permits a semaphore may have (an Acquire's `limit`).
    #[arg(long, env = "LEASEHOLD_MAX_SEMAPHORE_LIMIT", default_value_t = 1_000)]
    pub max_semaphore_limit: u32,

    /// Most Acquire calls that may wait at once on this replica.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS", default_value_t = 10_000)]
    pub max_waiters: usize,

    /// Most leases one KeepAlive heartbeat may name, and leases one Session
    /// stream tracks for its loss accounting (it may hold more). The
    /// clients of this repository split a larger set over several
    /// heartbeats of 1,000.
    #[arg(long, env = "LEASEHOLD_MAX_STREAM_LEASES", default_value_t = 1_000)]
    pub max_stream_leases: usize,

    /// Most heartbeats per second one KeepAlive stream may send; more are
    /// read later (back-pressure), not dropped.
    #[arg(long, env = "LEASEHOLD_MAX_STREAM_RATE", default_value_t = 100)]
    pub max_stream_rate: u32,

    /// Longest lock name, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_NAME_LEN", default_value_t = 256)]
    pub max_name_len: usize,

    /// Longest holder label, in bytes.
    #[arg(long, env = "LEASEHOLD_MAX_HOLDER_LEN", default_value_t = 256)]
    pub max_holder_len: usize,

    /// Most leases one tenant may hold through this replica; 0 for no cap.
    /// Applies with --auth-file (without it there are no tenants), to
    /// `@root` as to any tenant.
    #[arg(long, env = "LEASEHOLD_TENANT_MAX_LEASES", default_value_t = 0)]
    pub tenant_max_leases: usize,

    /// Most Acquire calls one tenant may have waiting on this replica; 0 for
    /// no cap.
    #[arg(long, env = "LEASEHOLD_TENANT_MAX_WAITERS", default_value_t = 0)]
    pub tenant_max_waiters: usize,

    /// Most KeepAlive, Session and Observe streams one tenant may have open
    /// on this replica; 0 for no cap.
    #[arg(long, env = "LEASEHOLD_TENANT_MAX_STREAMS", default_value_t = 0)]
    pub tenant_max_streams: usize,

    /// Most requests per second (calls and stream opens) from one tenant to
    /// this replica, with a burst of one second's worth; 0 for no cap.
    #[arg(long, env = "LEASEHOLD_TENANT_MAX_RATE", default_value_t = 0)]
    pub tenant_max_rate: u32,

    /// Most leases taken through one connection and held; 0 for no cap.
    #[arg(long, env = "LEASEHOLD_CONN_MAX_LEASES", default_value_t = 0)]
    pub conn_max_leases: usize,

    /// Most Acquire calls waiting at once on one connection; 0 for no cap.
    #[arg(long, env = "LEASEHOLD_CONN_MAX_WAITERS", default_value_t = 0)]
    pub conn_max_waiters: usize,

    /// Most KeepAlive, Session and Observe streams open on one connection; 0
    /// for no cap.
    #[arg(long, env = "LEASEHOLD_CONN_MAX_STREAMS", default_value_t = 0)]
    pub conn_max_streams: usize,

    /// Most requests per second on one connection, with a burst of one
    /// second's worth; 0 for no cap.
    #[arg(long, env = "LEASEHOLD_CONN_MAX_RATE", default_value_t = 0)]
    pub conn_max_rate: u32,
}

impl From<&LimitFlags> for Limits {
    fn from(flags: &LimitFlags) -> Self {
        // Every field named: a flag added without its limit does not compile.
        let LimitFlags {
            ttl_min,
            ttl_max,
            ttl_default,
            ttl_auto_floor,
            max_wait,
            max_lock_delay,
            max_semaphore_limit,
            max_waiters,
            max_stream_leases,
            max_stream_rate,
            max_name_len,
            max_holder_len,
            tenant_max_leases,
            tenant_max_waiters,
            tenant_max_streams,
            tenant_max_rate,
            conn_max_leases,
            conn_max_waiters,
            conn_max_streams,
            conn_max_rate,
        } = flags.clone();
        Limits {
            ttl_min,
            ttl_max,
            ttl_default,
            ttl_auto_floor,
            max_wait,
            max_lock_delay,
            max_semaphore_limit,
            max_waiters,
            max_stream_leases,
            max_stream_rate,
            max_name_len,
            max_holder_len,
            tenant_max_leases,
            tenant_max_waiters,
            tenant_max_streams,
            tenant_max_rate,
            conn_max_leases,
            conn_max_waiters,
            conn_max_streams,
            conn_max_rate,
        }
    }
}

impl Default for LimitFlags {
    /// The flags' defaults, from the limits' own.
    fn default() -> Self {
        let Limits {
            ttl_min,
            ttl_max,
            ttl_default,
            ttl_auto_floor,
            max_wait,
            max_lock_delay,
            max_semaphore_limit,
            max_waiters,
            max_stream_leases,
            max_stream_rate,
            max_name_len,
            max_holder_len,
            tenant_max_leases,
            tenant_max_waiters,
            tenant_max_streams,
            tenant_max_rate,
            conn_max_leases,
            conn_max_waiters,
            conn_max_streams,
            conn_max_rate,
        } = Limits::default();
        LimitFlags {
            ttl_min,
            ttl_max,
            ttl_default,
            ttl_auto_floor,
            max_wait,
            max_lock_delay,
            max_semaphore_limit,
            max_waiters,
            max_stream_leases,
            max_stream_rate,
            max_name_len,
            max_holder_len,
            tenant_max_leases,
            tenant_max_waiters,
            tenant_max_streams,
            tenant_max_rate,
            conn_max_leases,
            conn_max_waiters,
            conn_max_streams,
            conn_max_rate,
        }
    }
}

impl LimitFlags {
    /// The limits these flags set.
    pub fn limits(&self) -> Limits {
        Limits::from(self)
    }
}

/// `--worker-threads` resolved on a machine of `cores` cores: 0 is one
/// thread on two cores or fewer (measured fastest there: the broker shares
/// them with its clients or its store, and a thread hand-off costs more
/// than it spreads), else one per core (not measured: no bigger machine was
/// at hand; the runtime's own default).
fn runtime_threads(worker_threads: usize, cores: usize) -> usize {
    match worker_threads {
        0 if cores <= 2 => 1,
        0 => cores,
        n => n,
    }
}

impl ServeConfig {
    /// The threads the broker's runtime gets (see `worker_threads`).
    pub fn runtime_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        runtime_threads(self.worker_threads, cores)
    }

    /// Checks the settings that must agree with each other.
    pub fn check(&self) -> Result<(), String> {
        self.limits.limits().check()?;
        if self.replica_acks > 0 && self.replica_ack_timeout >= self.store_timeout {
            return Err(format!(
                "--replica-ack-timeout ({}) must be below --store-timeout ({})",
                format_duration(self.replica_ack_timeout),
                format_duration(self.store_timeout)
            ));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("--tls-cert and --tls-key go together: give both, or neither".into());
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return Err("--tls-client-ca needs --tls-cert and --tls-key".into());
        }
        if self.max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        if self.max_concurrent_streams == 0 {
            return Err("--max-concurrent-streams must be at least 1".into());
        }
        if self.handshake_timeout.is_zero() {
            return Err("--handshake-timeout must be above zero".into());
        }
        if self.conn_max_buffer < self.max_message_size || self.max_buffer < self.conn_max_buffer {
            return Err(format!(
                "--max-message-size ({}) <= --conn-max-buffer ({}) <= --max-buffer ({}) must \
                 hold: a message the broker accepts must fit what it may buffer",
                self.max_message_size, self.conn_max_buffer, self.max_buffer
            ));
        }
        if self.ping_interval.is_zero() || self.ping_timeout.is_zero() {
            return Err("--ping-interval and --ping-timeout must be above zero".into());
        }
        if self.metrics_max_connections == 0 {
            return Err("--metrics-max-connections must be at least 1".into());
        }
        if self.metrics_timeout.is_zero() {
            return Err("--metrics-timeout must be above zero".into());
        }
        if self.http_timeout.is_zero() {
            return Err("--http-timeout must be above zero".into());
        }
        if self.store_connections == 0 {
            return Err("--store-connections must be at least 1".into());
        }
        if self.store_client_cert.is_some() != self.store_client_key.is_some() {
            return Err(
                "--store-client-cert and --store-client-key go together: give both, or neither"
                    .into(),
            );
        }
        Ok(())
    }

    /// The store options these settings give; reads the store's TLS files
    /// (an unreadable one is an error naming it).
    pub fn store_options(&self) -> Result<crate::store::StoreOptions, String> {
        let read = |flag: &str, path: &Option<PathBuf>| -> Result<Option<Vec<u8>>, String> {
            path.as_ref()
                .map(|p| std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display())))
                .transpose()
        };
        let client_cert = read("--store-client-cert", &self.store_client_cert)?;
        let client_key = read("--store-client-key", &self.store_client_key)?;
        Ok(crate::store::StoreOptions {
            key_prefix: self.key_prefix.clone(),
            timeout: self.store_timeout,
            replica_acks: self.replica_acks,
            replica_ack_timeout: self.replica_ack_timeout,
            connections: self.store_connections,
            tls_ca: read("--store-ca", &self.store_ca)?,
            tls_client: client_cert.zip(client_key),
            record_format: if self.redis_record_format == 1 {
                crate::store::RecordFormat::V1
            } else {
                crate::store::RecordFormat::V2
            },
        })
    }

    /// A configuration with every default, serving on the given addresses:
    /// what tests and embedders start from.
    pub fn new(listen: SocketAddr, metrics_listen: SocketAddr, store: impl Into<String>) -> Self {
        ServeConfig {
            listen,
            metrics_listen,
            metrics_max_connections: 64,
            metrics_timeout: Duration::from_secs(5),
            http_listen: None,
            http_timeout: Duration::from_secs(10),
            store: store.into(),
            key_prefix: "leasehold:".into(),
            store_timeout: Duration::from_secs(1),
            replica_acks: 0,
            replica_ack_timeout: Duration::from_millis(500),
            redis_record_format: 2,
            store_connections: 16,
            health_interval: Duration::from_secs(1),
            census_interval: Duration::from_secs(15),
            census_max_names: 100_000,
            store_unsafe: StoreUnsafe::Refuse,
            enable_revoke: false,
            auth_file: None,
            reload_interval: Duration::from_secs(10),
            max_connections: 10_000,
            handshake_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(20),
            ping_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1_000,
            max_message_size: 1024 * 1024,
            conn_max_buffer: 8 * 1024 * 1024,
            max_buffer: 64 * 1024 * 1024,
            worker_threads: 0,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            store_ca: None,
            store_client_cert: None,
            store_client_key: None,
            limits: LimitFlags::default(),
            log_format: LogFormat::Pretty,
            audit_log: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags' parsed defaults are the limits' own defaults (clap's
    /// `default_value`s and `Limits::default` say the same).
    #[test]
    fn flag_defaults_are_the_limits_defaults() {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            flags: LimitFlags,
        }
        let parsed = <Only as clap::Parser>::try_parse_from(["leasehold"]).unwrap();
        assert_eq!(parsed.flags.limits(), Limits::default());
        assert_eq!(LimitFlags::default().limits(), Limits::default());
    }

    /// The default picks one thread on two cores (the measured fastest
    /// there) and one per core beyond; an explicit count is kept.
    #[test]
    fn worker_threads_default_to_one_on_two_cores() {
        assert_eq!(runtime_threads(0, 1), 1);
        assert_eq!(runtime_threads(0, 2), 1);
        assert_eq!(runtime_threads(0, 8), 8);
        assert_eq!(runtime_threads(3, 2), 3);
        assert_eq!(runtime_threads(1, 8), 1);
    }
}
