//! The faults: a store with its brokers ([`Topology`]), and a seeded
//! schedule that, while the clients run, picks a fault the topology
//! supports, injects it for a random while, heals it, and counts it.
//!
//! The faults ([`Fault`]): a broker killed (SIGKILL) and started again, or
//! stopped (SIGSTOP) and continued; the clients' path to a broker (a proxy
//! in front of each) stalled or cut; the path from a broker to its store (a
//! proxy) stalled (a black hole: bytes wait, then arrive late), cut,
//! slowed, or its answers held back while requests pass; one broker, in a
//! network namespace of the test's own (Redis, PostgreSQL), partitioned
//! from the store by nftables drops; the store restarted with its data
//! (Redis with an fsync'd append-only file, PostgreSQL with fsync), or
//! losing it (Redis FLUSHALL; the memory store dies with its broker),
//! recorded as a [`Call::Wipe`] so that the model knows; the store's clock
//! stepped a second or two (libfaketime), recorded as a
//! [`Call::ClockStep`]; on PostgreSQL a session holding a name's row (or
//! the fence counter's) locked, and the server turned read-only; on
//! Sentinel, Cluster and a PostgreSQL standby, the primary killed and a
//! replica promoted, once a run ([`Call::Failover`]). Each fault lasts at
//! most [`MAX_FAULT`], which with the store timeout bounds how late a call
//! without an answer may still take effect (`history::UNKNOWN_WINDOW`).

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use super::{
    history::Recorder,
    rng::Rng,
    spec::{Answer, Call},
    workload::{LOCKS, SEMAPHORE},
};
use crate::{
    netns::NetNs, proxy::Proxy, topology, BrokerProcess, EtcdServer, PostgresServer, RedisServer,
    ZooKeeperServer,
};

/// The longest a fault is held before it is healed.
pub const MAX_FAULT: Duration = Duration::from_millis(1_500);

/// Which store a run is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The memory store, which lives (and dies) in its one broker.
    Memory,
    /// One redis-server, with an fsync'd append-only file; its two brokers
    /// write lease records in format 2 and format 1.
    Redis,
    /// Redis behind Sentinel: a primary, two replicas, three sentinels;
    /// grants acknowledged by a replica (`--replica-acks 1`).
    Sentinel,
    /// Redis Cluster: three primaries with a replica each
    /// (`--replica-acks 1`).
    Cluster,
    /// One PostgreSQL server (with fsync).
    Postgres,
    /// PostgreSQL with a synchronous standby, promoted once in a run; the
    /// brokers on a two-host URL (`target_session_attrs=read-write`).
    Standby,
    /// One etcd member.
    Etcd,
    /// One ZooKeeper server (standalone).
    ZooKeeper,
}

/// Every store and topology, in the order runs report them.
pub const ALL: [StoreKind; 8] = [
    StoreKind::Memory,
    StoreKind::Redis,
    StoreKind::Sentinel,
    StoreKind::Cluster,
    StoreKind::Postgres,
    StoreKind::Standby,
    StoreKind::Etcd,
    StoreKind::ZooKeeper,
];

impl StoreKind {
    /// The store `s` names, as [`name`](Self::name) spells it; `None` for
    /// no store.
    pub fn parse(s: &str) -> Option<StoreKind> {
        match s {
            "memory" => Some(StoreKind::Memory),
            "redis" => Some(StoreKind::Redis),
            "sentinel" => Some(StoreKind::Sentinel),
            "cluster" => Some(StoreKind::Cluster),
            "postgres" => Some(StoreKind::Postgres),
            "standby" => Some(StoreKind::Standby),
            "etcd" => Some(StoreKind::Etcd),
            "zookeeper" => Some(StoreKind::ZooKeeper),
            _ => None,
        }
    }

    /// Its name, as runs report it and `LEASEHOLD_MODEL_STORES` lists it.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::Sentinel => "sentinel",
            StoreKind::Cluster => "cluster",
            StoreKind::Postgres => "postgres",
            StoreKind::Standby => "standby",
            StoreKind::Etcd => "etcd",
            StoreKind::ZooKeeper => "zookeeper",
        }
    }
}

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A broker killed (SIGKILL) and started again after the hold; on the
    /// memory store its data dies with it (recorded as a [`Call::Wipe`]).
    KillBroker,
    /// A broker stopped (SIGSTOP) for the hold, then continued.
    PauseBroker,
    /// The clients' path to a broker (its front proxy) stalled for the
    /// hold: their bytes wait, then arrive late.
    StallClients,
    /// The clients' connections to a broker cut, at once.
    CutClients,
    /// A broker's path to the store stalled for the hold.
    StallStore,
    /// A broker's connections to the store cut, at once.
    CutStore,
    /// A broker's path to the store slowed (50 to 300 ms a chunk) for the
    /// hold.
    SlowStore,
    /// The store's answers to a broker held back for the hold while its
    /// requests pass: calls that time out yet took effect.
    HoldAnswers,
    /// The broker in the test's network namespace partitioned from the
    /// store (nftables drops) for the hold.
    Partition,
    /// PostgreSQL turned read-only for the hold, as a primary demoted
    /// behind one URL: writes refused.
    ReadOnly,
    /// The store restarted with its data (Redis from its fsync'd
    /// append-only file, PostgreSQL with fsync).
    RestartStore,
    /// Redis's data lost (FLUSHALL), recorded as a [`Call::Wipe`].
    WipeStore,
    /// The store's clock stepped a second or two either way (libfaketime),
    /// kept within 3 s of the truth; recorded as a [`Call::ClockStep`].
    StepClock,
    /// A PostgreSQL session holding a name's row (or the fence counter's)
    /// locked for the hold.
    HoldRow,
    /// The store's primary killed and a replica promoted, once a run
    /// (Sentinel, Cluster, a PostgreSQL standby); recorded as a
    /// [`Call::Failover`].
    Failover,
}

impl Fault {
    /// What it does, in words, as a run's report counts it.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillBroker => "broker SIGKILL + restart",
            Fault::PauseBroker => "broker SIGSTOP/SIGCONT",
            Fault::StallClients => "clients' path to a broker stalled",
            Fault::CutClients => "clients' connections to a broker cut",
            Fault::StallStore => "store path stalled",
            Fault::Partition => "broker partitioned from the store (netns)",
            Fault::SlowStore => "store path slowed (50-300 ms a chunk)",
            Fault::HoldAnswers => "store's answers held back (requests pass)",
            Fault::ReadOnly => "store turned read-only",
            Fault::StepClock => "store clock stepped",
            Fault::CutStore => "store connections cut",
            Fault::RestartStore => "store restarted with its data",
            Fault::WipeStore => "store lost its data",
            Fault::HoldRow => "a session holds a name's row",
            Fault::Failover => "the store's primary killed, a replica promoted",
        }
    }
}

enum Server {
    Memory,
    Redis(RedisServer),
    Sentinel(topology::Sentinel),
    Cluster(topology::Cluster),
    Postgres(PostgresServer),
    Standby {
        primary: PostgresServer,
        standby: PostgresServer,
    },
    Etcd(EtcdServer),
    ZooKeeper(ZooKeeperServer),
}

/// A store, its brokers, and the links the nemesis acts on: a proxy in
/// front of each broker (its clients' path), and one between each broker
/// and the store, except for a broker in a network namespace of its own
/// (Redis, when the tests may make one), whose path is partitioned with
/// the kernel's own packet filter instead.
pub struct Topology {
    /// The store it runs.
    pub kind: StoreKind,
    server: Server,
    /// Per broker: the proxy its clients go through.
    fronts: Vec<Arc<Proxy>>,
    /// Per broker: the proxy between it and the store, if any.
    links: Vec<Option<Arc<Proxy>>>,
    /// The namespace broker 0 runs in, if any.
    netns: Option<NetNs>,
    /// The brokers, each a process of its own (a fault kills or stops one),
    /// in the order of [`broker_urls`](Self::broker_urls).
    pub brokers: Vec<BrokerProcess>,
    /// The Redis clock's offset from the true clock, in seconds.
    clock_offset: i64,
    /// Whether the one failover a run allows has happened.
    failed_over: bool,
}

/// The flags every broker of a run gets: Revoke is part of the workload.
const BROKER_FLAGS: &[&str] = &["--enable-revoke"];
/// On PostgreSQL, a small pool, so that a row held by another session or a
/// statement the server is slow to answer presses on it.
const POSTGRES_FLAGS: &[&str] = &["--enable-revoke", "--store-connections", "4"];
/// On one Redis, the second broker writes lease records in format 1 (as
/// during a rolling update from a broker before format 2), the first in
/// format 2, the default: each reads, renews, reports and replaces the
/// other's records under every fault.
const RECORD_FORMAT_1_FLAGS: &[&str] = &["--enable-revoke", "--redis-record-format", "1"];
/// On a replicated Redis, grants wait for a replica's acknowledgement, so
/// that a failover loses none (the product's advice for Sentinel and
/// Cluster).
const REPLICATED_FLAGS: &[&str] = &["--enable-revoke", "--replica-acks", "1"];

/// A proxy's address as a broker URL.
fn proxied(proxy: &Proxy) -> String {
    format!("http://{}", proxy.addr())
}

impl Topology {
    /// Starts the store and its brokers: one for the memory store (it
    /// lives in its broker), `brokers` otherwise.
    pub async fn start(kind: StoreKind, brokers: usize) -> Topology {
        // A network namespace for one broker, on the stores that can listen
        // on its subnet (Redis, PostgreSQL), when the tests may make one.
        let netns = match kind {
            StoreKind::Redis | StoreKind::Postgres => match NetNs::new() {
                Ok(ns) => Some(ns),
                Err(why) => {
                    eprintln!("model-check: no network partitions in this run: {why}");
                    None
                }
            },
            _ => None,
        };
        let bind: Vec<std::net::IpAddr> = netns.iter().map(|ns| ns.host_ip().into()).collect();
        let server = match kind {
            StoreKind::Memory => Server::Memory,
            StoreKind::Redis => Server::Redis(RedisServer::start_for_model(&bind)),
            StoreKind::Postgres => Server::Postgres(PostgresServer::start_for_model(&bind)),
            StoreKind::Sentinel => Server::Sentinel(topology::Sentinel::start().await),
            StoreKind::Cluster => Server::Cluster(topology::Cluster::start(3, 1).await),
            StoreKind::Standby => {
                let primary = PostgresServer::start_durable();
                let standby = primary.start_standby(true).await;
                Server::Standby { primary, standby }
            }
            StoreKind::Etcd => Server::Etcd(EtcdServer::start()),
            StoreKind::ZooKeeper => Server::ZooKeeper(ZooKeeperServer::start_faketime()),
        };
        let mut list = Vec::new();
        let mut links = Vec::new();
        match &server {
            Server::Memory => {
                list.push(BrokerProcess::start_logged("memory", BROKER_FLAGS, None).await);
                links.push(None);
            }
            Server::Redis(redis) => {
                for i in 0..brokers {
                    match (&netns, i) {
                        (Some(ns), 0) => {
                            list.push(
                                BrokerProcess::start_in(
                                    ns,
                                    &redis.url_at(ns.host_ip().into()),
                                    BROKER_FLAGS,
                                )
                                .await,
                            );
                            links.push(None);
                        }
                        _ => {
                            let proxy = Arc::new(
                                Proxy::start(
                                    format!("127.0.0.1:{}", redis.port()).parse().unwrap(),
                                )
                                .await,
                            );
                            let flags = if i % 2 == 1 {
                                RECORD_FORMAT_1_FLAGS
                            } else {
                                BROKER_FLAGS
                            };
                            list.push(
                                BrokerProcess::start_logged(
                                    &format!("redis://{}", proxy.addr()),
                                    flags,
                                    None,
                                )
                                .await,
                            );
                            links.push(Some(proxy));
                        }
                    }
                }
            }
            Server::Etcd(etcd) => {
                for _ in 0..brokers {
                    let proxy = Arc::new(
                        Proxy::start(format!("127.0.0.1:{}", etcd.port()).parse().unwrap()).await,
                    );
                    list.push(
                        BrokerProcess::start_logged(
                            &format!("etcd://{}", proxy.addr()),
                            BROKER_FLAGS,
                            None,
                        )
                        .await,
                    );
                    links.push(Some(proxy));
                }
            }
            Server::ZooKeeper(zookeeper) => {
                for _ in 0..brokers {
                    let proxy = Arc::new(
                        Proxy::start(format!("127.0.0.1:{}", zookeeper.port()).parse().unwrap())
                            .await,
                    );
                    list.push(
                        BrokerProcess::start_logged(
                            &format!("zookeeper://{}", proxy.addr()),
                            BROKER_FLAGS,
                            None,
                        )
                        .await,
                    );
                    links.push(Some(proxy));
                }
            }
            Server::Sentinel(t) => {
                let sentinels: Vec<String> =
                    t.sentinel_addrs().iter().map(ToString::to_string).collect();
                let url = format!(
                    "redis+sentinel://{}/{}/0",
                    sentinels.join(","),
                    t.master_name()
                );
                for _ in 0..brokers {
                    list.push(BrokerProcess::start_logged(&url, REPLICATED_FLAGS, None).await);
                    links.push(None);
                }
            }
            Server::Cluster(c) => {
                let seeds: Vec<String> = c.live_addrs().iter().map(ToString::to_string).collect();
                let url = format!("redis+cluster://{}", seeds.join(","));
                for _ in 0..brokers {
                    list.push(BrokerProcess::start_logged(&url, REPLICATED_FLAGS, None).await);
                    links.push(None);
                }
            }
            Server::Standby { primary, standby } => {
                let url = format!(
                    "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
                    primary.port(),
                    standby.port()
                );
                for _ in 0..brokers {
                    list.push(BrokerProcess::start_logged(&url, BROKER_FLAGS, None).await);
                    links.push(None);
                }
            }
            Server::Postgres(pg) => {
                for i in 0..brokers {
                    if let (Some(ns), 0) = (&netns, i) {
                        let url = format!(
                            "postgres://postgres@{}:{}/postgres",
                            ns.host_ip(),
                            pg.port()
                        );
                        list.push(BrokerProcess::start_in(ns, &url, POSTGRES_FLAGS).await);
                        links.push(None);
                        continue;
                    }
                    let proxy = Arc::new(
                        Proxy::start(format!("127.0.0.1:{}", pg.port()).parse().unwrap()).await,
                    );
                    let url = pg.url().replace(
                        &format!(":{}/", pg.port()),
                        &format!(":{}/", proxy.addr().port()),
                    );
                    list.push(BrokerProcess::start_logged(&url, POSTGRES_FLAGS, None).await);
                    links.push(Some(proxy));
                }
            }
        }
        let mut fronts = Vec::new();
        for broker in &list {
            fronts.push(Arc::new(Proxy::start(broker.addr).await));
        }
        Topology {
            kind,
            server,
            fronts,
            links,
            netns,
            brokers: list,
            clock_offset: 0,
            failed_over: false,
        }
    }

    /// The brokers' addresses, as their clients reach them (through the
    /// front proxies).
    pub fn broker_urls(&self) -> Vec<String> {
        self.fronts.iter().map(|p| proxied(p)).collect()
    }

    /// The faults this topology supports.
    pub fn faults(&self) -> Vec<Fault> {
        let mut faults = vec![
            Fault::KillBroker,
            Fault::PauseBroker,
            Fault::StallClients,
            Fault::CutClients,
        ];
        match self.server {
            Server::Memory => {}
            // ZooKeeper's leases are judged by its leader's wall clock (the
            // mtime it stamps): stepped as Redis' is.
            Server::Redis(_) | Server::ZooKeeper(_) => faults.extend([
                Fault::StallStore,
                Fault::CutStore,
                Fault::SlowStore,
                Fault::HoldAnswers,
                Fault::RestartStore,
                Fault::WipeStore,
                Fault::StepClock,
            ]),
            Server::Postgres(_) => faults.extend([
                Fault::StallStore,
                Fault::CutStore,
                Fault::SlowStore,
                Fault::HoldAnswers,
                Fault::RestartStore,
                Fault::HoldRow,
                Fault::ReadOnly,
                Fault::StepClock,
            ]),
            Server::Etcd(_) => faults.extend([
                Fault::StallStore,
                Fault::CutStore,
                Fault::SlowStore,
                Fault::HoldAnswers,
                Fault::RestartStore,
                Fault::WipeStore,
            ]),
            Server::Sentinel(_) | Server::Cluster(_) | Server::Standby { .. } => {
                faults.push(Fault::Failover);
            }
        }
        if self.netns.is_some() {
            faults.push(Fault::Partition);
        }
        faults
    }

    /// A broker with a proxy between it and the store.
    fn linked(&self, rng: &mut Rng) -> Option<Arc<Proxy>> {
        let linked: Vec<&Arc<Proxy>> = self.links.iter().flatten().collect();
        if linked.is_empty() {
            return None;
        }
        Some(linked[rng.index(linked.len())].clone())
    }

    /// Injects `fault` for `hold` (at most [`MAX_FAULT`]) and heals it;
    /// false if this topology could not (a second failover).
    async fn inject(
        &mut self,
        fault: Fault,
        rng: &mut Rng,
        hold: Duration,
        record: &Recorder,
    ) -> bool {
        let b = rng.index(self.brokers.len());
        match fault {
            Fault::KillBroker => {
                let before = record.now();
                self.brokers[b].kill();
                tokio::time::sleep(hold).await;
                self.brokers[b].restart().await;
                if self.kind == StoreKind::Memory {
                    // Its leases, lines and records died with it.
                    record.record(
                        usize::MAX,
                        "*",
                        Call::Wipe,
                        Answer::Happened,
                        before,
                        record.now(),
                    );
                }
            }
            Fault::PauseBroker => {
                let pid = crate::as_pid(self.brokers[b].pid());
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                tokio::time::sleep(hold).await;
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            Fault::StallClients => {
                self.fronts[b].stall();
                tokio::time::sleep(hold).await;
                self.fronts[b].pass();
            }
            Fault::CutClients => self.fronts[b].drop_connections(),
            Fault::StallStore => {
                if let Some(p) = self.linked(rng) {
                    p.stall();
                    tokio::time::sleep(hold).await;
                    p.pass();
                }
            }
            Fault::CutStore => {
                if let Some(p) = self.linked(rng) {
                    p.drop_connections();
                }
            }
            Fault::SlowStore => {
                if let Some(p) = self.linked(rng) {
                    p.set_latency(Duration::from_millis(rng.between(50, 300)));
                    tokio::time::sleep(hold).await;
                    p.set_latency(Duration::ZERO);
                }
            }
            Fault::HoldAnswers => {
                if let Some(p) = self.linked(rng) {
                    p.hold_answers();
                    tokio::time::sleep(hold).await;
                    p.pass();
                }
            }
            Fault::ReadOnly => {
                if let Server::Postgres(pg) = &self.server {
                    // As a primary demoted behind one URL: writes refused.
                    pg.psql(&[
                        "ALTER SYSTEM SET default_transaction_read_only = on",
                        "SELECT pg_reload_conf()",
                    ])
                    .await;
                    tokio::time::sleep(hold).await;
                    pg.psql(&[
                        "ALTER SYSTEM RESET default_transaction_read_only",
                        "SELECT pg_reload_conf()",
                    ])
                    .await;
                }
            }
            Fault::Partition => {
                if let Some(ns) = &self.netns {
                    ns.partition();
                    tokio::time::sleep(hold).await;
                    ns.heal();
                }
            }
            Fault::RestartStore => match &mut self.server {
                Server::Redis(r) => r.restart(),
                Server::Postgres(p) => p.restart(),
                Server::Etcd(e) => e.restart(),
                Server::ZooKeeper(z) => z.restart(),
                _ => {}
            },
            Fault::Failover => {
                if self.failed_over {
                    return false;
                }
                self.failed_over = true;
                let before = record.now();
                match &mut self.server {
                    Server::Sentinel(t) => {
                        t.kill_primary().await;
                        t.wait_for_new_primary(Duration::from_secs(60)).await;
                    }
                    Server::Cluster(c) => {
                        // The primary that serves the first lock's slot.
                        let victim = c.holder_of(&format!("test:{}", LOCKS[0])).await;
                        let primaries = c.primaries().await;
                        let victim = victim
                            .filter(|v| primaries.contains(v))
                            .unwrap_or(primaries[0]);
                        c.kill_node(c.index_of(victim));
                        c.wait_until_ok(Duration::from_secs(60)).await;
                    }
                    Server::Standby { primary, standby } => {
                        primary.stop();
                        // As a failover manager would: it takes a while.
                        tokio::time::sleep(hold).await;
                        standby.promote().await;
                    }
                    _ => {}
                }
                record.record(
                    usize::MAX,
                    "*",
                    Call::Failover,
                    Answer::Happened,
                    before,
                    record.now(),
                );
            }
            Fault::WipeStore => {
                let before = record.now();
                let wiped = match &mut self.server {
                    Server::Redis(r) => {
                        let mut c = r.connection().await;
                        let _: redis::RedisResult<()> =
                            redis::cmd("FLUSHALL").query_async(&mut c).await;
                        true
                    }
                    Server::Etcd(e) => {
                        e.wipe();
                        true
                    }
                    Server::ZooKeeper(z) => {
                        z.wipe();
                        true
                    }
                    _ => false,
                };
                if wiped {
                    record.record(
                        usize::MAX,
                        "*",
                        Call::Wipe,
                        Answer::Happened,
                        before,
                        record.now(),
                    );
                }
            }
            Fault::StepClock => {
                let server: Option<&dyn Fn(i64)> = match &self.server {
                    Server::Redis(r) => Some(&|s| r.set_clock_offset(s)),
                    Server::Postgres(p) => Some(&|s| p.set_clock_offset(s)),
                    Server::ZooKeeper(z) => Some(&|s| z.set_clock_offset(s)),
                    _ => None,
                };
                if let Some(set_clock_offset) = server {
                    // One or two seconds either way, the offset kept within
                    // three seconds of the truth.
                    let mut step = i64::try_from(rng.between(1, 2)).expect("1 or 2");
                    if rng.chance(0.5) {
                        step = -step;
                    }
                    let offset = (self.clock_offset + step).clamp(-3, 3);
                    let step = offset - self.clock_offset;
                    if step != 0 {
                        let before = record.now();
                        set_clock_offset(offset);
                        self.clock_offset = offset;
                        record.record(
                            usize::MAX,
                            "*",
                            Call::ClockStep {
                                delta_ms: step * 1000,
                            },
                            Answer::Happened,
                            before,
                            record.now(),
                        );
                    }
                }
            }
            Fault::HoldRow => {
                if let Server::Postgres(pg) = &self.server {
                    let names = [LOCKS[0], LOCKS[1], SEMAPHORE];
                    let name = names[rng.index(names.len())];
                    let sleep = format!("SELECT pg_sleep({})", hold.as_secs_f64());
                    // The brokers' --key-prefix test: names the schema.
                    let lock = if rng.chance(0.3) {
                        // Every grant of every name raises the counter.
                        "SELECT 1 FROM test.fence_counter FOR UPDATE".to_owned()
                    } else {
                        format!("SELECT 1 FROM test.leases WHERE name LIKE '%{name}' FOR UPDATE")
                    };
                    pg.psql(&["BEGIN", &lock, &sleep, "COMMIT"]).await;
                }
            }
        }
        true
    }
}

/// What the nemesis did.
#[derive(Debug, Default)]
pub struct Injected {
    /// How many times each fault was injected (a second failover, refused,
    /// is not counted).
    pub counts: BTreeMap<Fault, u64>,
}

/// Injects faults from `rng` until `stop`: a quiet spell of 1 to 4 s,
/// then one fault for 0.2 s to [`MAX_FAULT`].
pub async fn run(
    mut topology: Topology,
    seed: u64,
    record: Arc<Recorder>,
    injected: Arc<Mutex<Injected>>,
    stop: Arc<AtomicBool>,
) -> Topology {
    let mut rng = Rng::fork(seed, 0);
    let faults = topology.faults();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.between(1_000, 4_000))).await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let fault = faults[rng.index(faults.len())];
        let max_ms = u64::try_from(MAX_FAULT.as_millis()).expect("MAX_FAULT is 1.5 s");
        let hold = Duration::from_millis(rng.between(200, max_ms));
        if topology.inject(fault, &mut rng, hold, &record).await {
            *injected.lock().unwrap().counts.entry(fault).or_default() += 1;
        }
    }
    topology
}
