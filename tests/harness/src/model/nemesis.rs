//! The faults: a store with its brokers ([`Topology`]), and a seeded
//! schedule that, while the clients run, picks a fault the store supports,
//! injects it for a random while, heals it, and counts it.
//!
//! The faults: a broker killed (SIGKILL) and started again, or stopped
//! (SIGSTOP) and continued; the path from a broker to its store stalled
//! (a black hole: bytes wait, then arrive late) or cut (connections
//! dropped); the store restarted with its data (Redis with an fsync'd
//! append-only file, PostgreSQL with fsync), or losing it (Redis FLUSHALL;
//! the memory store dies with its broker), recorded as a [`Call::Wipe`] so
//! that the model knows; a PostgreSQL session holding a name's row locked.
//! Each fault lasts at most [`MAX_FAULT`], which with the store timeout
//! bounds how late a call without an answer may still take effect
//! (`history::UNKNOWN_WINDOW`).

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
use crate::{proxy::Proxy, BrokerProcess, PostgresServer, RedisServer};

/// The longest a fault is held before it is healed.
pub const MAX_FAULT: Duration = Duration::from_millis(1_500);

/// Which store a run is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
    Postgres,
}

impl StoreKind {
    pub fn parse(s: &str) -> Option<StoreKind> {
        match s {
            "memory" => Some(StoreKind::Memory),
            "redis" => Some(StoreKind::Redis),
            "postgres" => Some(StoreKind::Postgres),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    KillBroker,
    PauseBroker,
    StallStore,
    CutStore,
    RestartStore,
    WipeStore,
    HoldRow,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillBroker => "broker SIGKILL + restart",
            Fault::PauseBroker => "broker SIGSTOP/SIGCONT",
            Fault::StallStore => "store path stalled",
            Fault::CutStore => "store connections cut",
            Fault::RestartStore => "store restarted with its data",
            Fault::WipeStore => "store lost its data",
            Fault::HoldRow => "a session holds a name's row",
        }
    }
}

enum Server {
    Memory,
    Redis(RedisServer),
    Postgres(PostgresServer),
}

/// A store, the proxies in front of it (one per broker) and the brokers.
pub struct Topology {
    pub kind: StoreKind,
    server: Server,
    proxies: Vec<Arc<Proxy>>,
    pub brokers: Vec<BrokerProcess>,
}

/// The flags every broker of a run gets: Revoke is part of the workload.
const BROKER_FLAGS: &[&str] = &["--enable-revoke"];

impl Topology {
    /// Starts the store and its brokers: one for the memory store (it
    /// lives in its broker), `brokers` otherwise, each through a proxy.
    pub async fn start(kind: StoreKind, brokers: usize) -> Topology {
        let (server, upstream) = match kind {
            StoreKind::Memory => (Server::Memory, None),
            StoreKind::Redis => {
                let redis = RedisServer::start_persistent();
                let addr = format!("127.0.0.1:{}", redis.port()).parse().unwrap();
                (Server::Redis(redis), Some(addr))
            }
            StoreKind::Postgres => {
                let pg = PostgresServer::start_durable();
                let addr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
                (Server::Postgres(pg), Some(addr))
            }
        };
        let mut proxies = Vec::new();
        let mut list = Vec::new();
        match upstream {
            None => list.push(BrokerProcess::start_logged("memory", BROKER_FLAGS, None).await),
            Some(addr) => {
                for _ in 0..brokers {
                    let proxy = Arc::new(Proxy::start(addr).await);
                    let url = match &server {
                        Server::Redis(_) => format!("redis://{}", proxy.addr()),
                        Server::Postgres(pg) => pg.url().replace(&format!(":{}/", pg.port()), &format!(":{}/", proxy.addr().port())),
                        Server::Memory => unreachable!(),
                    };
                    list.push(BrokerProcess::start_logged(&url, BROKER_FLAGS, None).await);
                    proxies.push(proxy);
                }
            }
        }
        Topology { kind, server, proxies, brokers: list }
    }

    pub fn broker_urls(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.url()).collect()
    }

    /// The faults this topology supports.
    pub fn faults(&self) -> Vec<Fault> {
        match self.server {
            Server::Memory => vec![Fault::KillBroker, Fault::PauseBroker],
            Server::Redis(_) => vec![
                Fault::KillBroker,
                Fault::PauseBroker,
                Fault::StallStore,
                Fault::CutStore,
                Fault::RestartStore,
                Fault::WipeStore,
            ],
            Server::Postgres(_) => vec![
                Fault::KillBroker,
                Fault::PauseBroker,
                Fault::StallStore,
                Fault::CutStore,
                Fault::RestartStore,
                Fault::HoldRow,
            ],
        }
    }

    /// Injects `fault` for `hold` (at most [`MAX_FAULT`]) and heals it.
    async fn inject(&mut self, fault: Fault, rng: &mut Rng, hold: Duration, record: &Recorder) {
        let b = rng.below(self.brokers.len() as u64) as usize;
        match fault {
            Fault::KillBroker => {
                let before = record.now();
                self.brokers[b].kill();
                tokio::time::sleep(hold).await;
                self.brokers[b].restart().await;
                if self.kind == StoreKind::Memory {
                    // Its leases, lines and records died with it.
                    record.record(usize::MAX, "*", Call::Wipe, Answer::Wiped, before, record.now());
                }
            }
            Fault::PauseBroker => {
                let pid = self.brokers[b].pid() as libc::pid_t;
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                tokio::time::sleep(hold).await;
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            Fault::StallStore => {
                let p = &self.proxies[b % self.proxies.len()];
                p.stall();
                tokio::time::sleep(hold).await;
                p.pass();
            }
            Fault::CutStore => self.proxies[b % self.proxies.len()].drop_connections(),
            Fault::RestartStore => match &mut self.server {
                Server::Redis(r) => r.restart(),
                Server::Postgres(p) => p.restart(),
                Server::Memory => {}
            },
            Fault::WipeStore => {
                if let Server::Redis(r) = &self.server {
                    let before = record.now();
                    let mut c = r.connection().await;
                    let _: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut c).await;
                    record.record(usize::MAX, "*", Call::Wipe, Answer::Wiped, before, record.now());
                }
            }
            Fault::HoldRow => {
                if let Server::Postgres(pg) = &self.server {
                    let names = [LOCKS[0], LOCKS[1], SEMAPHORE];
                    let name = names[rng.below(3) as usize];
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
    }
}

/// What the nemesis did.
#[derive(Debug, Default)]
pub struct Injected {
    pub counts: BTreeMap<Fault, u64>,
}

/// Injects faults from `rng` until `stop`: a quiet spell of 1 to 4 s,
/// then one fault for 0.2 s to [`MAX_FAULT`].
pub async fn run(mut topology: Topology, seed: u64, record: Arc<Recorder>, injected: Arc<Mutex<Injected>>, stop: Arc<AtomicBool>) -> Topology {
    let mut rng = Rng::fork(seed, 0);
    let faults = topology.faults();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.between(1_000, 4_000))).await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let fault = faults[rng.below(faults.len() as u64) as usize];
        let hold = Duration::from_millis(rng.between(200, MAX_FAULT.as_millis() as u64));
        topology.inject(fault, &mut rng, hold, &record).await;
        *injected.lock().unwrap().counts.entry(fault).or_default() += 1;
    }
    topology
}
