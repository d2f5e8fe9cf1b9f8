//! `leasehold-bench etcd-mapping`: the design study of an etcd store (what
//! each way of holding a Leasehold lease on etcd costs), against one etcd.
//!
//! Two mappings of a lease on a name, each measured by acquire+release
//! cycles (each worker on a name of its own) and by the renewal of
//! `--leases` leases:
//!
//! * (a) one etcd lease per grant, as etcd's `client/v3/concurrency` does:
//!   acquire = `LeaseGrant(ttl)`, then `Txn(if create_revision(key) == 0
//!   then Put(key, token, lease) else Get(key))`; release = `Txn(if
//!   value(key) == token then Delete(key))`, then `LeaseRevoke`; renewal =
//!   `LeaseKeepAlive` of that lease (one request message per lease, on one
//!   stream). Also (a'), the same with the release a `LeaseRevoke` alone
//!   (it deletes the keys attached to the lease, and the lease id is the
//!   grant's own: the owner check).
//! * (b) keys holding their own expiry, one etcd lease per broker for its
//!   liveness only: the key's value is `token ++ expiry` (32 hex digits,
//!   then 16 hex digits of µs since the Unix epoch); acquire = `Txn(if
//!   version(key) == 0 then Put(key, token ++ expiry) else Get(key))`;
//!   release = `Txn(if token ++ "" < value(key) < token ++ "g" then
//!   Delete(key))` (the value starts with the token: its hex digits sort
//!   below "g"); renewal = the same compare with a `Put` of the new expiry,
//!   a `Txn` per key, or batched: one `Txn` whose success branch holds up
//!   to `--batch` nested `Txn`s, one per key (each with its own compare, so
//!   each key's outcome is its own; etcd's `--max-txn-ops`, 128 by default,
//!   bounds the outer Txn's operations plus the widest branch of a nested
//!   one: 126 keys a Txn). etcd has no time API: the
//!   expiry here is this process's wall clock, the clock the contract
//!   forbids (the store's clock decides expiry); the figures are what (b)
//!   would cost if it had a clock to use.
//!
//! For each: cycles/s, round trips per cycle (counted as they are sent),
//! Raft writes per cycle (counted from the code, and measured: etcd's
//! `/metrics` `etcd_server_proposals_committed_total` before and after),
//! WAL fsyncs per cycle (`etcd_disk_wal_fsync_duration_seconds_count`:
//! etcd commits concurrent proposals in one batch) and etcd's CPU per cycle
//! (/proc/<pid>/stat utime+stime before and after), then the renewal of
//! `--leases` leases: wall time of a round renewing all of them, etcd CPU
//! and Raft writes per renewed lease. Each figure over `--runs` runs (3):
//! min / median / max. Between scenarios (not measured) the keyspace is
//! compacted to the current revision.

use std::{
    process::ExitCode,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use leasehold_server::duration::parse_duration;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{
    metadata::MetadataValue,
    service::{interceptor::InterceptedService, Interceptor},
    transport::Channel,
    Request, Status,
};

use crate::{
    etcd::proto::etcdserverpb::{
        auth_client::AuthClient,
        cluster_client::ClusterClient,
        compare::{CompareResult, CompareTarget, TargetUnion},
        kv_client::KvClient,
        lease_client::LeaseClient,
        maintenance_client::MaintenanceClient,
        request_op::Request as Op,
        response_op::Response as OpResponse,
        AuthenticateRequest, CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest,
        LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, MemberListRequest,
        PutRequest, RangeRequest, RequestOp, StatusRequest, TxnRequest, TxnResponse,
    },
    probe::cpu_seconds,
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench etcd-mapping`.
#[derive(clap::Args, Debug)]
pub struct EtcdMappingArgs {
    /// The etcd endpoint (e.g. `http://127.0.0.1:2379`). Its `/metrics` is
    /// read on the same address (plain HTTP only).
    #[arg(long)]
    etcd: String,
    /// The etcd process, for its CPU time; by default the process named
    /// `etcd` listening on the endpoint's port.
    #[arg(long)]
    etcd_pid: Option<u32>,
    /// Worker counts of the cycles (each worker cycles on a name of its own).
    #[arg(long, default_value = "1,16,64", value_delimiter = ',')]
    workers: Vec<usize>,
    /// How long each run of cycles, and each run of renewals, lasts.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Leases of the renewal scenarios.
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// Runs of every scenario (min / median / max over them).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Lease TTL: etcd's lease TTL (whole seconds) in (a), the key's expiry
    /// in (b).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// Keys renewed by one batched Txn of (b). etcd's --max-txn-ops (128 by
    /// default) bounds a Txn's widest branch plus, for a nested Txn, the
    /// nested one's widest (its two compares): 126 nested Txns at most.
    #[arg(long, default_value_t = 126)]
    batch: usize,
    /// Renewal Txns of (b) in flight at once (over one HTTP/2 connection).
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// An etcd user (with `--password`): Authenticate first and send its
    /// token as the `token` metadata of every call.
    #[arg(long, requires = "password")]
    user: Option<String>,
    /// The user's password.
    #[arg(long, env = "ETCD_PASSWORD", hide_env_values = true)]
    password: Option<String>,
}

/// Runs the scenarios; see the module doc.
pub async fn etcd_mapping(args: EtcdMappingArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-bench etcd-mapping: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// Adds etcd's auth token (`token` metadata) to every call, when there is
/// one.
#[derive(Clone, Default)]
struct Token(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok(request)
    }
}

type Svc = InterceptedService<Channel, Token>;

/// The clients of one etcd connection (one HTTP/2 connection: calls are
/// multiplexed on it, as the broker's would be).
#[derive(Clone)]
struct Etcd {
    kv: KvClient<Svc>,
    lease: LeaseClient<Svc>,
    maintenance: MaintenanceClient<Svc>,
    cluster: ClusterClient<Svc>,
}

impl Etcd {
    async fn connect(url: &str, auth: Option<(&str, &str)>) -> Result<Self, String> {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .map_err(|e| format!("--etcd {url}: {e}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("cannot reach etcd at {url}: {e}"))?;
        let token = match auth {
            None => Token(None),
            Some((name, password)) => {
                let answer = AuthClient::new(channel.clone())
                    .authenticate(AuthenticateRequest {
                        name: name.to_owned(),
                        password: password.to_owned(),
                    })
                    .await
                    .map_err(|s| format!("etcd Authenticate: {}", s.message()))?
                    .into_inner();
                Token(Some(answer.token.parse().map_err(|_| {
                    "etcd Authenticate: a token that is no metadata value".to_owned()
                })?))
            }
        };
        let svc = |channel: &Channel| InterceptedService::new(channel.clone(), token.clone());
        Ok(Etcd {
            kv: KvClient::new(svc(&channel)),
            lease: LeaseClient::new(svc(&channel)),
            maintenance: MaintenanceClient::new(svc(&channel)),
            cluster: ClusterClient::new(svc(&channel)),
        })
    }

    async fn txn(&mut self, txn: TxnRequest) -> Result<TxnResponse, String> {
        Ok(self
            .kv
            .txn(txn)
            .await
            .map_err(|s| format!("etcd Txn: {}", s.message()))?
            .into_inner())
    }

    async fn grant(&mut self, ttl: Duration) -> Result<i64, String> {
        let granted = self
            .lease
            .lease_grant(LeaseGrantRequest {
                ttl: whole_seconds(ttl),
                id: 0,
            })
            .await
            .map_err(|s| format!("etcd LeaseGrant: {}", s.message()))?
            .into_inner();
        if granted.error.is_empty() {
            Ok(granted.id)
        } else {
            Err(format!("etcd LeaseGrant: {}", granted.error))
        }
    }

    async fn revoke(&mut self, id: i64) -> Result<(), String> {
        self.lease
            .lease_revoke(LeaseRevokeRequest { id })
            .await
            .map_err(|s| format!("etcd LeaseRevoke: {}", s.message()))?;
        Ok(())
    }

    /// The current revision (a serializable Range of nothing would do; a
    /// Status answers with the header too).
    async fn revision(&mut self) -> Result<i64, String> {
        let status = self
            .maintenance
            .status(StatusRequest {})
            .await
            .map_err(|s| format!("etcd Status: {}", s.message()))?
            .into_inner();
        Ok(status.header.map_or(0, |h| h.revision))
    }

    /// Compacts the keyspace to the current revision and waits for it
    /// (between scenarios: each leaves its history behind).
    async fn compact(&mut self) -> Result<(), String> {
        let revision = self.revision().await?;
        self.kv
            .compact(CompactionRequest {
                revision,
                physical: true,
            })
            .await
            .map_err(|s| format!("etcd Compact: {}", s.message()))?;
        Ok(())
    }
}

/// `ttl` in whole seconds, rounded up (etcd's leases count seconds), at
/// least 1.
fn whole_seconds(ttl: Duration) -> i64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// A fresh owner token: 32 hex digits (128 random bits).
fn new_token() -> Vec<u8> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap_or_else(|_| {
        // No entropy source: unique is enough for a benchmark.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        bytes = now.as_nanos().to_le_bytes();
    });
    hex(&bytes).into_bytes()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// (b)'s value: the token, then the expiry in µs since the Unix epoch by
/// this process's wall clock (16 hex digits, so that values sort by it).
fn token_and_expiry(token: &[u8], ttl: Duration) -> Vec<u8> {
    let expiry = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(ttl)
        .as_micros();
    let mut value = token.to_vec();
    value.extend_from_slice(
        format!("{:016x}", u64::try_from(expiry).unwrap_or(u64::MAX)).as_bytes(),
    );
    value
}

fn compare(
    key: &[u8],
    result: CompareResult,
    target: CompareTarget,
    union: TargetUnion,
) -> Compare {
    Compare {
        result: result as i32,
        target: target as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(union),
    }
}

fn op(request: Op) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

fn put(key: &[u8], value: Vec<u8>, lease: i64) -> RequestOp {
    op(Op::RequestPut(PutRequest {
        key: key.to_vec(),
        value,
        lease,
        ..PutRequest::default()
    }))
}

fn get(key: &[u8]) -> RequestOp {
    op(Op::RequestRange(RangeRequest {
        key: key.to_vec(),
        ..RangeRequest::default()
    }))
}

fn delete(key: &[u8]) -> RequestOp {
    op(Op::RequestDeleteRange(DeleteRangeRequest {
        key: key.to_vec(),
        ..DeleteRangeRequest::default()
    }))
}

/// The owner check of (b) and (c): the key's value starts with `token` (a
/// value `token ++ s`, where s starts with a byte below "g" (a hex digit,
/// ':'), is above `token` and below `token ++ "g"`; the value of any other
/// token of as many hex digits is below or above both).
fn owned_by(key: &[u8], token: &[u8]) -> Vec<Compare> {
    let mut above = token.to_vec();
    above.push(b'g');
    vec![
        compare(
            key,
            CompareResult::Greater,
            CompareTarget::Value,
            TargetUnion::Value(token.to_vec()),
        ),
        compare(
            key,
            CompareResult::Less,
            CompareTarget::Value,
            TargetUnion::Value(above),
        ),
    ]
}

/// (b)'s renewal of one key as a Txn.
fn renewal(key: &[u8], token: &[u8], ttl: Duration) -> TxnRequest {
    TxnRequest {
        compare: owned_by(key, token),
        success: vec![put(key, token_and_expiry(token, ttl), 0)],
        failure: Vec::new(),
    }
}

/// The ways of holding a lease measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mapping {
    /// (a): a lease per grant; release = compare-and-delete, then revoke.
    LeasePerGrant,
    /// (a'): a lease per grant; release = the revoke alone.
    LeasePerGrantRevoke,
    /// (b): keys with their own expiry.
    KeyExpiry,
    /// (c): (a) as the design note proposes the store does it: the grant's
    /// Txn also checks the name's wait line is empty and the fence epoch
    /// key is the one the broker knows; the release's Txn also writes the
    /// token's end record ("released") on a shared linger lease, and the
    /// LeaseRevoke is sent without waiting for it.
    Proposed,
}

/// What the workers of (c) share: the key prefix, the fence epoch key's
/// create_revision, and the current linger lease (a new one a second, TTL
/// LINGER + 1 s: the end records written within that second ride on it).
#[derive(Clone)]
struct Shared {
    prefix: String,
    epoch: i64,
    linger: tokio::sync::watch::Receiver<i64>,
}

/// How long an end record outlives the lease's end (the contract's LINGER).
const LINGER: Duration = Duration::from_secs(10);

impl Mapping {
    const ALL: [Mapping; 4] = [
        Mapping::LeasePerGrant,
        Mapping::LeasePerGrantRevoke,
        Mapping::KeyExpiry,
        Mapping::Proposed,
    ];

    fn label(self) -> &'static str {
        match self {
            Mapping::LeasePerGrant => "(a) lease per grant",
            Mapping::LeasePerGrantRevoke => "(a') lease per grant, release = revoke",
            Mapping::KeyExpiry => "(b) key with its own expiry",
            Mapping::Proposed => "(c) (a) with line, epoch and end record, revoke not awaited",
        }
    }

    /// Raft writes of one uncontended cycle, counted from [`cycle`]: each
    /// LeaseGrant, LeaseRevoke and Txn holding a write (even one whose
    /// compare fails: etcd proposes every Txn that could write) is a
    /// proposal; a Range is a read (ReadIndex, no proposal). (c) adds one
    /// LeaseGrant a second (its linger lease), not counted here.
    fn writes_per_cycle(self) -> u64 {
        match self {
            Mapping::LeasePerGrant | Mapping::Proposed => 4,
            Mapping::LeasePerGrantRevoke => 3,
            Mapping::KeyExpiry => 2,
        }
    }

    /// Round trips of one uncontended cycle, counted from [`cycle`].
    fn round_trips_per_cycle(self) -> u64 {
        self.writes_per_cycle()
    }
}

/// One acquire+release cycle on `key` with `mapping`; the round trips it
/// took into `round_trips`, and the grant's fence (the revision of the
/// Txn that created the key: its create_revision). (c)'s LeaseRevoke, not
/// awaited, joins `revokes`.
async fn cycle(
    etcd: &mut Etcd,
    mapping: Mapping,
    key: &[u8],
    ttl: Duration,
    shared: &Shared,
    round_trips: &mut u64,
    revokes: &mut Vec<tokio::task::JoinHandle<Result<(), String>>>,
) -> Result<i64, String> {
    let token = new_token();
    let absent = |target, union| vec![compare(key, CompareResult::Equal, target, union)];
    match mapping {
        Mapping::Proposed => {
            // The name, without the prefix the other mappings' keys have.
            let name = String::from_utf8_lossy(key);
            let name = name
                .strip_prefix(&format!("{}/names/", shared.prefix))
                .unwrap_or(&name);
            let line = format!("{}/q/{name}/", shared.prefix).into_bytes();
            let end = format!("{}/e/{}", shared.prefix, String::from_utf8_lossy(&token));
            let lease_key = format!("{}/l/{name}", shared.prefix).into_bytes();
            let lease = etcd.grant(ttl).await?;
            // The record: token, then what Describe shows (holder, TTL ms,
            // lock-delay ms), after a ':' (below "g": see owned_by).
            let mut record = token.clone();
            record.extend_from_slice(format!(":bench-holder:{}:0", ttl.as_millis()).as_bytes());
            let granted = etcd
                .txn(TxnRequest {
                    compare: vec![
                        compare(
                            &lease_key,
                            CompareResult::Equal,
                            CompareTarget::Create,
                            TargetUnion::CreateRevision(0),
                        ),
                        // Nobody in line (every key of the range has
                        // version 0: an empty range).
                        Compare {
                            range_end: prefix_end(&line),
                            ..compare(
                                &line,
                                CompareResult::Equal,
                                CompareTarget::Version,
                                TargetUnion::Version(0),
                            )
                        },
                        // The fence epoch is the one this broker knows (a
                        // wiped etcd has none: the grant fails).
                        compare(
                            format!("{}/epoch", shared.prefix).as_bytes(),
                            CompareResult::Equal,
                            CompareTarget::Create,
                            TargetUnion::CreateRevision(shared.epoch),
                        ),
                    ],
                    success: vec![put(&lease_key, record, lease)],
                    failure: vec![get(&lease_key)],
                })
                .await?;
            let linger = *shared.linger.borrow();
            let released = etcd
                .txn(TxnRequest {
                    compare: owned_by(&lease_key, &token),
                    success: vec![
                        op(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: lease_key.clone(),
                            prev_kv: true,
                            ..DeleteRangeRequest::default()
                        })),
                        put(end.as_bytes(), b"x".to_vec(), linger),
                    ],
                    failure: vec![get(&lease_key), get(end.as_bytes())],
                })
                .await?;
            let mut revoker = etcd.clone();
            revokes.push(tokio::spawn(async move { revoker.revoke(lease).await }));
            *round_trips += 4;
            if !granted.succeeded || !released.succeeded {
                return Err(format!(
                    "{}: a free name was held, or the release found another owner",
                    mapping.label()
                ));
            }
            Ok(granted.header.map_or(0, |h| h.revision))
        }
        Mapping::LeasePerGrant | Mapping::LeasePerGrantRevoke => {
            let lease = etcd.grant(ttl).await?;
            let granted = etcd
                .txn(TxnRequest {
                    compare: absent(CompareTarget::Create, TargetUnion::CreateRevision(0)),
                    success: vec![put(key, token.clone(), lease)],
                    failure: vec![get(key)],
                })
                .await?;
            *round_trips += 2;
            if !granted.succeeded {
                return Err(format!("{}: a free name was held", mapping.label()));
            }
            if mapping == Mapping::LeasePerGrant {
                let released = etcd
                    .txn(TxnRequest {
                        compare: vec![compare(
                            key,
                            CompareResult::Equal,
                            CompareTarget::Value,
                            TargetUnion::Value(token),
                        )],
                        success: vec![delete(key)],
                        failure: Vec::new(),
                    })
                    .await?;
                *round_trips += 1;
                if !released.succeeded {
                    return Err(format!(
                        "{}: the release found another owner",
                        mapping.label()
                    ));
                }
            }
            etcd.revoke(lease).await?;
            *round_trips += 1;
            Ok(granted.header.map_or(0, |h| h.revision))
        }
        Mapping::KeyExpiry => {
            let granted = etcd
                .txn(TxnRequest {
                    compare: absent(CompareTarget::Version, TargetUnion::Version(0)),
                    success: vec![put(key, token_and_expiry(&token, ttl), 0)],
                    failure: vec![get(key)],
                })
                .await?;
            let released = etcd
                .txn(TxnRequest {
                    compare: owned_by(key, &token),
                    success: vec![delete(key)],
                    failure: Vec::new(),
                })
                .await?;
            *round_trips += 2;
            if !granted.succeeded || !released.succeeded {
                return Err(format!(
                    "{}: a free name was held, or the release found another owner",
                    mapping.label()
                ));
            }
            Ok(granted.header.map_or(0, |h| h.revision))
        }
    }
}

/// What etcd's process and metrics say at one moment.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    cpu_s: f64,
    proposals: f64,
    fsyncs: f64,
}

/// Where the samples are read.
struct Probe {
    pid: u32,
    /// host:port of the client URL, where etcd serves /metrics.
    metrics_at: String,
}

impl Probe {
    async fn sample(&self) -> Result<Sample, String> {
        let text = metrics(&self.metrics_at).await?;
        let metric = |name: &str| -> Result<f64, String> {
            text.lines()
                .find_map(|line| {
                    let value = line.strip_prefix(name)?.strip_prefix(' ')?;
                    value.trim().parse().ok()
                })
                .ok_or_else(|| format!("etcd's /metrics has no {name}"))
        };
        Ok(Sample {
            proposals: metric("etcd_server_proposals_committed_total")?,
            fsyncs: metric("etcd_disk_wal_fsync_duration_seconds_count")?,
            cpu_s: cpu_seconds(self.pid),
            at: Instant::now(),
        })
    }
}

/// etcd's /metrics text (Prometheus' text format), over plain HTTP/1.0 on
/// the client port (etcd serves HTTP/1 and gRPC on it).
async fn metrics(address: &str) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("etcd /metrics at {address}: {e}"))?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("etcd /metrics: {e}"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| format!("etcd /metrics: {e}"))?;
    if !answer.starts_with("HTTP/1.0 200") && !answer.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "etcd /metrics: {}",
            answer.lines().next().unwrap_or("no answer")
        ));
    }
    Ok(answer)
}

/// The differences between two samples.
#[derive(Clone, Copy, Debug)]
struct Delta {
    seconds: f64,
    cpu_s: f64,
    proposals: f64,
    fsyncs: f64,
}

fn delta(before: Sample, after: Sample) -> Delta {
    Delta {
        seconds: after.at.duration_since(before.at).as_secs_f64(),
        cpu_s: after.cpu_s - before.cpu_s,
        proposals: after.proposals - before.proposals,
        fsyncs: after.fsyncs - before.fsyncs,
    }
}

/// min / median / max of `values` (`-` for none).
fn spread(values: &[f64], digits: usize) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => "-".to_owned(),
        n => format!(
            "{:.digits$} / {:.digits$} / {:.digits$}",
            sorted[0],
            sorted[n / 2],
            sorted[n - 1]
        ),
    }
}

/// One run of cycles: `workers` workers, each on a name of its own, for
/// `duration`.
struct CycleRun {
    cycles: u64,
    round_trips: u64,
    delta: Delta,
}

async fn cycle_run(
    etcd: &Etcd,
    probe: &Probe,
    mapping: Mapping,
    workers: usize,
    duration: Duration,
    ttl: Duration,
    shared: &Shared,
) -> Result<CycleRun, String> {
    let before = probe.sample().await?;
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (mut etcd, shared) = (etcd.clone(), shared.clone());
        let key = format!("{}/names/{workers}/{w}", shared.prefix).into_bytes();
        tasks.push(tokio::spawn(async move {
            let (mut cycles, mut round_trips, mut fence) = (0u64, 0u64, 0i64);
            let mut revokes = Vec::new();
            while Instant::now() < end {
                let granted = cycle(
                    &mut etcd,
                    mapping,
                    &key,
                    ttl,
                    &shared,
                    &mut round_trips,
                    &mut revokes,
                )
                .await?;
                // The fence rises with every grant of the name: the
                // revision of the Txn that created the key.
                if granted <= fence {
                    return Err(format!("fence {granted} after {fence}"));
                }
                fence = granted;
                cycles += 1;
            }
            for revoke in revokes {
                revoke.await.map_err(|e| e.to_string())??;
            }
            Ok::<(u64, u64), String>((cycles, round_trips))
        }));
    }
    let (mut cycles, mut round_trips) = (0, 0);
    for task in tasks {
        let (c, r) = task.await.map_err(|e| e.to_string())??;
        cycles += c;
        round_trips += r;
    }
    let after = probe.sample().await?;
    Ok(CycleRun {
        cycles,
        round_trips,
        delta: delta(before, after),
    })
}

/// Keeps a broker's own liveness lease alive (one KeepAlive a third of its
/// TTL) until aborted: the one etcd lease of (b).
fn keep_broker_alive(etcd: &Etcd, lease: i64, ttl: Duration) -> tokio::task::JoinHandle<()> {
    let mut client = etcd.lease.clone();
    tokio::spawn(async move {
        let (tx, rx) = mpsc::channel(1);
        if tx.send(LeaseKeepAliveRequest { id: lease }).await.is_err() {
            return;
        }
        let Ok(response) = client.lease_keep_alive(ReceiverStream::new(rx)).await else {
            return;
        };
        let mut answers = response.into_inner();
        let mut tick = tokio::time::interval(ttl / 3);
        tick.tick().await;
        while let Ok(Some(_)) = answers.message().await {
            tick.tick().await;
            if tx.send(LeaseKeepAliveRequest { id: lease }).await.is_err() {
                return;
            }
        }
    })
}

/// One run of renewals: rounds renewing every lease, back to back, for at
/// least `duration` (one round at least).
struct RenewalRun {
    rounds: u64,
    renewed: u64,
    delta: Delta,
}

/// (a)'s renewal: `leases` kept alive over one LeaseKeepAlive stream, a
/// request message per lease (etcd renews one lease id per message), all of
/// a round sent back to back; a round ends with its last answer.
async fn keep_alive_rounds(
    etcd: &Etcd,
    probe: &Probe,
    leases: &[i64],
    duration: Duration,
) -> Result<RenewalRun, String> {
    let mut client = etcd.lease.clone();
    let (tx, rx) = mpsc::channel(leases.len().max(1));
    let mut rx = Some(rx);
    let mut answers = None;
    let (mut rounds, mut renewed) = (0, 0);
    let before = probe.sample().await?;
    let end = Instant::now() + duration;
    while rounds == 0 || Instant::now() < end {
        for &id in leases {
            tx.send(LeaseKeepAliveRequest { id })
                .await
                .map_err(|_| "etcd LeaseKeepAlive: the stream ended".to_owned())?;
        }
        // The call opens with the first round queued: etcd answers the
        // call's headers only once a request arrives.
        if let Some(rx) = rx.take() {
            answers = Some(
                client
                    .lease_keep_alive(ReceiverStream::new(rx))
                    .await
                    .map_err(|s| format!("etcd LeaseKeepAlive: {}", s.message()))?
                    .into_inner(),
            );
        }
        let stream = answers
            .as_mut()
            .ok_or_else(|| "etcd LeaseKeepAlive: no stream".to_owned())?;
        for _ in leases {
            match stream.message().await {
                Ok(Some(answer)) if answer.ttl > 0 => renewed += 1,
                Ok(Some(answer)) => return Err(format!("lease {:x} lost", answer.id)),
                Ok(None) => return Err("etcd LeaseKeepAlive: the stream ended".to_owned()),
                Err(s) => return Err(format!("etcd LeaseKeepAlive: {}", s.message())),
            }
        }
        rounds += 1;
    }
    let after = probe.sample().await?;
    Ok(RenewalRun {
        rounds,
        renewed,
        delta: delta(before, after),
    })
}

/// Runs `txns` with up to `in_flight` at once; how many keys each renewed
/// (a nested Txn, or the Txn itself, that succeeded).
async fn run_txns(etcd: &Etcd, txns: Vec<TxnRequest>, in_flight: usize) -> Result<u64, String> {
    use futures_util::StreamExt;
    let renewed = futures_util::stream::iter(txns.into_iter().map(|txn| {
        let mut etcd = etcd.clone();
        async move {
            let answer = etcd.txn(txn).await?;
            let nested = answer
                .responses
                .iter()
                .filter(|r| matches!(&r.response, Some(OpResponse::ResponseTxn(t)) if t.succeeded))
                .count() as u64;
            Ok::<u64, String>(if nested > 0 {
                nested
            } else {
                u64::from(answer.succeeded)
            })
        }
    }))
    .buffer_unordered(in_flight.max(1))
    .collect::<Vec<_>>()
    .await;
    renewed.into_iter().sum()
}

/// (b)'s renewal: every key's expiry put again, a Txn per key (`batch` 1)
/// or `batch` keys per Txn (nested Txns, each its own compare).
#[allow(clippy::too_many_arguments)]
async fn txn_rounds(
    etcd: &Etcd,
    probe: &Probe,
    keys: &[(Vec<u8>, Vec<u8>)],
    ttl: Duration,
    batch: usize,
    in_flight: usize,
    duration: Duration,
) -> Result<RenewalRun, String> {
    let round = || -> Vec<TxnRequest> {
        if batch <= 1 {
            keys.iter()
                .map(|(key, token)| renewal(key, token, ttl))
                .collect()
        } else {
            keys.chunks(batch)
                .map(|chunk| TxnRequest {
                    compare: Vec::new(),
                    success: chunk
                        .iter()
                        .map(|(key, token)| op(Op::RequestTxn(renewal(key, token, ttl))))
                        .collect(),
                    failure: Vec::new(),
                })
                .collect()
        }
    };
    let (mut rounds, mut renewed) = (0, 0);
    let before = probe.sample().await?;
    let end = Instant::now() + duration;
    while rounds == 0 || Instant::now() < end {
        let done = run_txns(etcd, round(), in_flight).await?;
        if done != keys.len() as u64 {
            return Err(format!("renewed {done} of {} keys", keys.len()));
        }
        renewed += done;
        rounds += 1;
    }
    let after = probe.sample().await?;
    Ok(RenewalRun {
        rounds,
        renewed,
        delta: delta(before, after),
    })
}

/// Reads `--etcd`'s host:port (for /metrics).
fn address_of(url: &str) -> Result<String, String> {
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| format!("--etcd {url}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "--etcd {url}: plain http:// only (its /metrics is read over plain HTTP)"
        ));
    }
    let host = uri.host().ok_or_else(|| format!("--etcd {url}: no host"))?;
    Ok(format!("{host}:{}", uri.port_u16().unwrap_or(2379)))
}

/// This process's wall clock, in ms since the Unix epoch.
fn millis_since_epoch() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// The machine's CPU model (/proc/cpuinfo's first "model name").
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let (field, value) = l.split_once(':')?;
                (field.trim() == "model name").then(|| value.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

#[allow(clippy::too_many_lines)]
async fn run(args: EtcdMappingArgs) -> Result<(), String> {
    let auth = args.user.as_deref().zip(args.password.as_deref());
    let mut etcd = Etcd::connect(&args.etcd, auth).await?;
    let pid = match args.etcd_pid {
        Some(pid) => pid,
        None => crate::etcd::local_pid(&args.etcd).ok_or_else(|| {
            format!(
                "no process named etcd listens on {}'s port here: give --etcd-pid",
                args.etcd
            )
        })?,
    };
    let probe = Probe {
        pid,
        metrics_at: address_of(&args.etcd)?,
    };
    let status = etcd
        .maintenance
        .status(StatusRequest {})
        .await
        .map_err(|s| format!("etcd Status: {}", s.message()))?
        .into_inner();
    let members = etcd
        .cluster
        .member_list(MemberListRequest {})
        .await
        .map_err(|s| format!("etcd MemberList: {}", s.message()))?
        .into_inner()
        .members
        .len();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "etcd {} ({members} member(s), pid {pid}, db {} KiB); CPU {} x{}; load average {}",
        status.version,
        status.db_size / 1024,
        cpu_model(),
        std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    println!(
        "{} run(s) of {:?} each; TTL {:?} (etcd leases: {} s); min / median / max",
        args.runs,
        args.duration,
        args.ttl,
        whole_seconds(args.ttl)
    );
    let prefix = format!("leasehold-bench/etcd-mapping/{}", std::process::id());
    // (c)'s fence epoch: created once (a wiped etcd has none), its value
    // the base added to revisions (see the design note); here only its
    // create_revision is compared.
    let epoch = etcd
        .txn(TxnRequest {
            compare: Vec::new(),
            success: vec![put(
                format!("{prefix}/epoch").as_bytes(),
                format!("{}", millis_since_epoch() * 1000).into_bytes(),
                0,
            )],
            failure: Vec::new(),
        })
        .await?
        .header
        .map_or(0, |h| h.revision);
    let (linger_tx, linger_rx) = tokio::sync::watch::channel(0);
    let shared = Shared {
        prefix: prefix.clone(),
        epoch,
        linger: linger_rx,
    };

    // What etcd does on its own while nothing is asked of it.
    let before = probe.sample().await?;
    tokio::time::sleep(args.duration).await;
    let idle = delta(before, probe.sample().await?);
    println!(
        "idle for {:.1} s: {} proposals, {} fsyncs, {:.1} ms etcd CPU",
        idle.seconds,
        idle.proposals,
        idle.fsyncs,
        idle.cpu_s * 1e3
    );

    println!();
    println!("acquire+release cycles (each worker on a name of its own):");
    for mapping in Mapping::ALL {
        // The broker's one liveness lease of (b) (its places in lines, its
        // registration), kept alive through the runs.
        let broker = if mapping == Mapping::KeyExpiry {
            let lease = etcd.grant(args.ttl).await?;
            etcd.txn(TxnRequest {
                compare: Vec::new(),
                success: vec![put(
                    format!("{prefix}/brokers/1").as_bytes(),
                    Vec::new(),
                    lease,
                )],
                failure: Vec::new(),
            })
            .await?;
            Some((lease, keep_broker_alive(&etcd, lease, args.ttl)))
        } else {
            None
        };
        // (c)'s linger leases: a new one a second.
        let linger = (mapping == Mapping::Proposed).then(|| {
            let (mut etcd, tx) = (etcd.clone(), linger_tx.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    match etcd.grant(LINGER + Duration::from_secs(1)).await {
                        Ok(lease) => {
                            let _ = tx.send(lease);
                        }
                        Err(e) => eprintln!("linger lease: {e}"),
                    }
                }
            })
        });
        if linger.is_some() {
            // The first one granted before the runs.
            let mut rx = linger_tx.subscribe();
            rx.wait_for(|&lease| lease != 0)
                .await
                .map_err(|e| e.to_string())?;
        }
        for &workers in &args.workers {
            let mut runs = Vec::new();
            for _ in 0..args.runs.max(1) {
                runs.push(
                    cycle_run(
                        &etcd,
                        &probe,
                        mapping,
                        workers,
                        args.duration,
                        args.ttl,
                        &shared,
                    )
                    .await?,
                );
            }
            let per_cycle = |f: &dyn Fn(&CycleRun) -> f64| -> Vec<f64> {
                runs.iter().map(|r| f(r) / r.cycles.max(1) as f64).collect()
            };
            println!(
                "  {}, {workers} workers: cycles/s {}; round trips/cycle {} (sent: {}); \
                 Raft writes/cycle {} (committed proposals: {}); WAL fsyncs/cycle {}; \
                 etcd CPU µs/cycle {}",
                mapping.label(),
                spread(
                    &runs
                        .iter()
                        .map(|r| r.cycles as f64 / r.delta.seconds)
                        .collect::<Vec<_>>(),
                    0
                ),
                mapping.round_trips_per_cycle(),
                spread(&per_cycle(&|r| r.round_trips as f64), 2),
                mapping.writes_per_cycle(),
                spread(&per_cycle(&|r| r.delta.proposals), 2),
                spread(&per_cycle(&|r| r.delta.fsyncs), 3),
                spread(&per_cycle(&|r| r.delta.cpu_s * 1e6), 0),
            );
        }
        if let Some(linger) = linger {
            linger.abort();
            // Its last linger leases end (etcd revokes them, deleting
            // their end records) before the next scenario is measured.
            tokio::time::sleep(LINGER + Duration::from_secs(3)).await;
        }
        if let Some((lease, keeper)) = broker {
            keeper.abort();
            etcd.revoke(lease).await?;
        }
        etcd.compact().await?;
    }

    println!();
    println!(
        "renewal of {} leases (rounds renewing all, back to back):",
        args.leases
    );
    // (a): a lease per grant, each with its key.
    let mut leases = Vec::with_capacity(args.leases);
    for chunk in (0..args.leases).collect::<Vec<_>>().chunks(128) {
        let grants = chunk.iter().map(|&i| {
            let mut etcd = etcd.clone();
            let key = format!("{prefix}/renewed-a/{i}").into_bytes();
            let ttl = args.ttl;
            async move {
                let lease = etcd.grant(ttl).await?;
                etcd.txn(TxnRequest {
                    compare: Vec::new(),
                    success: vec![put(&key, new_token(), lease)],
                    failure: Vec::new(),
                })
                .await?;
                Ok::<i64, String>(lease)
            }
        });
        for granted in futures_util::future::join_all(grants).await {
            leases.push(granted?);
        }
    }
    let mut runs = Vec::new();
    for _ in 0..args.runs.max(1) {
        runs.push(keep_alive_rounds(&etcd, &probe, &leases, args.duration).await?);
    }
    // What Describe would read: the remaining time of one of them.
    if let Some(&first) = leases.first() {
        let left = etcd
            .lease
            .lease_time_to_live(LeaseTimeToLiveRequest {
                id: first,
                keys: true,
            })
            .await
            .map_err(|s| format!("etcd LeaseTimeToLive: {}", s.message()))?
            .into_inner();
        println!(
            "  (LeaseTimeToLive of the first after the rounds: {} s left of {} s, {} key(s))",
            left.ttl,
            left.granted_ttl,
            left.keys.len()
        );
    }
    report_renewals(
        &format!(
            "(a) LeaseKeepAlive, one stream, a message per lease ({} messages a round)",
            leases.len()
        ),
        &runs,
    );
    for chunk in leases.chunks(128) {
        let revokes = chunk.iter().map(|&id| {
            let mut etcd = etcd.clone();
            async move { etcd.revoke(id).await }
        });
        for revoked in futures_util::future::join_all(revokes).await {
            revoked?;
        }
    }
    etcd.compact().await?;

    // (b): keys with their own expiry, created in batches.
    let keys: Vec<(Vec<u8>, Vec<u8>)> = (0..args.leases)
        .map(|i| (format!("{prefix}/renewed-b/{i}").into_bytes(), new_token()))
        .collect();
    let creates = keys
        .chunks(args.batch.max(1))
        .map(|chunk| TxnRequest {
            compare: Vec::new(),
            success: chunk
                .iter()
                .map(|(key, token)| put(key, token_and_expiry(token, args.ttl), 0))
                .collect(),
            failure: Vec::new(),
        })
        .collect();
    run_txns(&etcd, creates, args.in_flight).await?;
    for (batch, label) in [
        (
            1,
            format!("(b) a Txn per key, {} in flight", args.in_flight),
        ),
        (
            args.batch.max(2),
            format!(
                "(b) {} keys per Txn (nested Txns), {} in flight",
                args.batch.max(2),
                args.in_flight
            ),
        ),
    ] {
        let mut runs = Vec::new();
        for _ in 0..args.runs.max(1) {
            runs.push(
                txn_rounds(
                    &etcd,
                    &probe,
                    &keys,
                    args.ttl,
                    batch,
                    args.in_flight,
                    args.duration,
                )
                .await?,
            );
        }
        report_renewals(&label, &runs);
        etcd.compact().await?;
    }
    etcd.kv
        .delete_range(DeleteRangeRequest {
            key: prefix.clone().into_bytes(),
            range_end: prefix_end(prefix.as_bytes()),
            ..DeleteRangeRequest::default()
        })
        .await
        .map_err(|s| format!("etcd DeleteRange: {}", s.message()))?;
    etcd.compact().await?;
    Ok(())
}

/// The end of the range of keys starting with `prefix` (etcd's
/// `clientv3.GetPrefixRangeEnd`): the prefix with its last byte below 0xff
/// raised by one, and what follows it dropped.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: to the end of the keyspace.
    vec![0]
}

fn report_renewals(label: &str, runs: &[RenewalRun]) {
    let values = |f: &dyn Fn(&RenewalRun) -> f64| -> Vec<f64> { runs.iter().map(f).collect() };
    println!(
        "  {label}: round of all {} ms; renewals/s {}; etcd CPU µs/renewed lease {}; \
         Raft writes/renewed lease {}; WAL fsyncs/renewed lease {} ({} rounds a run)",
        spread(
            &values(&|r| r.delta.seconds * 1e3 / r.rounds.max(1) as f64),
            1
        ),
        spread(&values(&|r| r.renewed as f64 / r.delta.seconds), 0),
        spread(
            &values(&|r| r.delta.cpu_s * 1e6 / r.renewed.max(1) as f64),
            2
        ),
        spread(&values(&|r| r.delta.proposals / r.renewed.max(1) as f64), 4),
        spread(&values(&|r| r.delta.fsyncs / r.renewed.max(1) as f64), 4),
        spread(&values(&|r| r.rounds as f64), 0),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_check_holds_the_values_of_its_token_only() {
        // What etcd's compare does with bytes: lexicographic order.
        let token = b"0123456789abcdef0123456789abcdef";
        let within = |value: &[u8]| {
            let mut above = token.to_vec();
            above.push(b'g');
            value > &token[..] && value < &above[..]
        };
        let mine = token_and_expiry(token, Duration::from_secs(10));
        assert!(within(&mine));
        assert!(within(&[&token[..], b"ffffffffffffffff"].concat()));
        assert!(within(&[&token[..], b"0000000000000000"].concat()));
        for other in [
            b"0123456789abcdef0123456789abcdee".to_vec(),
            b"0123456789abcdef0123456789abcdf0".to_vec(),
            b"f123456789abcdef0123456789abcdef".to_vec(),
            b"0000000000000000000000000000000f".to_vec(),
        ] {
            assert!(!within(&token_and_expiry(&other, Duration::from_secs(10))));
        }
        assert!(!within(token));
    }

    #[test]
    fn prefix_ends_as_etcds_own() {
        assert_eq!(prefix_end(b"a/b"), b"a/c");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn ttls_are_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(2500)), 3);
        assert_eq!(whole_seconds(Duration::from_secs(10)), 10);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }

    #[test]
    fn tokens_are_32_hex_digits() {
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert!(token.iter().all(u8::is_ascii_hexdigit));
        assert_ne!(token, new_token());
    }
}
