//! Real Redis topologies on loopback ports, for tests of the store on
//! Sentinel and Cluster: [`Sentinel`] (a primary, two replicas and three
//! sentinels) and [`Cluster`] (N primaries with M replicas each, created with
//! `redis-cli --cluster create`).
//!
//! Every process is a real `redis-server` on a free 127.0.0.1 port that no
//! other topology of the test process has had (a killed node's address stays
//! dead: nothing else answers the replicas and sentinels still calling it),
//! in a temporary directory of its own (nodes.conf, the sentinel's rewritten
//! configuration, replication files), killed with SIGKILL and its directory
//! removed on drop. The sentinels are `redis-server sentinel.conf --sentinel`:
//! Debian's redis-server package runs sentinel mode by itself (the
//! redis-sentinel package adds only a symlink and a service), so `scripts/test`
//! installs nothing more; `redis-cli` comes with it (redis-tools). Redis >= 7.0
//! is needed: cluster nodes get their bus port from `--cluster-port` (port +
//! 10000 may be past 65535 for an ephemeral port), and sharded pub/sub is 7.0.
//! `$LEASEHOLD_REDIS_SERVER` and `$LEASEHOLD_REDIS_CLI` name other binaries.
//!
//! Waits are on what the servers report (ROLE, INFO replication, SENTINEL
//! GET-MASTER-ADDR-BY-NAME / REPLICAS / SENTINELS, CLUSTER INFO / NODES),
//! polled every 50 ms up to a generous deadline, never a fixed sleep. The
//! waiting methods are async, so a broker and its clients served on the
//! test's runtime keep running while a test waits for a failover.
//!
//! The harness speaks to each server over a plain single-node redis-rs
//! connection and follows MOVED and ASK itself ([`Cluster::query`]), so it
//! needs neither the `sentinel` nor the `cluster-async` feature of redis-rs;
//! what a broker sees through those is what the tests are for. [`query`]
//! opens a connection per command: since WAIT counts only the writes of its
//! own connection, a write and its WAIT go together through [`query_pipe`].

use std::{
    collections::BTreeSet,
    future::Future,
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
    time::Duration,
};

use redis::{FromRedisValue, RedisResult, ServerErrorKind};
use tokio::time::Instant;

use super::{free_port, redis_binary, spawn_redis, spawn_until};

/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(50);
/// How long a topology may take to come up (loaded 2-core machines).
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long one command to one server may take: generous, since a server
/// starved of CPU (the tests run niced beside builds) can be slow, and a
/// killed one refuses connections at once anyway.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to one server whose commands wait as long as
/// [`QUERY_TIMEOUT`] lets them: the redis crate's own default gives up on
/// an answer after 500 ms, which a `WAIT 1 5000` for a replica still
/// syncing (a loaded machine) outlasts, and the test failed on "timed out"
/// after half a second where it meant to allow ten.
async fn connection(addr: SocketAddr) -> RedisResult<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(QUERY_TIMEOUT))
        .set_response_timeout(Some(QUERY_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The redis-cli binary: `$LEASEHOLD_REDIS_CLI`, or `redis-cli` on the PATH
/// (Debian's redis-server package depends on redis-tools, which has it).
fn redis_cli() -> String {
    std::env::var("LEASEHOLD_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// `127.0.0.1:port`.
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Parses `ip:port` (as in MOVED replies and CLUSTER NODES).
fn parse_addr(text: &str) -> Option<SocketAddr> {
    text.parse().ok()
}

/// A loopback port free now that no topology of this test process has had
/// before: a killed node's port stays unused, so that no other test's server
/// answers there (the killed primary's replica would resync from it and the
/// sentinels would make it a replica).
fn unused_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = free_port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// An empty directory of its own for the server about to start on `port`.
fn fresh_dir(kind: &str, port: u16) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "leasehold-{kind}-{}-{port}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// One server process of a topology: killed (SIGKILL) and its directory
/// removed on drop.
struct Node {
    addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn alive(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts redis-server on a free port in a fresh directory, with the
/// settings `extra` gives (called again for each try: a port it picks may be
/// taken too), retrying on other ports like [`super::RedisServer::start`].
fn start_node(kind: &str, extra: impl Fn() -> Vec<String>) -> Node {
    for _ in 0..5 {
        let port = unused_port();
        let dir = fresh_dir(kind, port);
        let mut args = vec![
            "--dir".to_owned(),
            dir.to_string_lossy().into_owned(),
            // A primary otherwise waits 5 s for more replicas before it
            // streams a full sync to the first.
            "--repl-diskless-sync-delay".to_owned(),
            "0".to_owned(),
        ];
        args.extend(extra());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Some(child) = spawn_redis(port, &args) {
            return Node {
                addr: loopback(port),
                dir,
                child: Some(child),
            };
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("redis-server ({kind}) did not start on any of 5 free ports");
}

/// One command to the server at `addr`, on a connection of its own, bounded
/// by a few seconds (a dead server refuses at once on loopback).
pub async fn query<T: FromRedisValue>(addr: SocketAddr, cmd: &redis::Cmd) -> RedisResult<T> {
    query_asking(addr, false, cmd).await
}

/// A pipeline to the server at `addr`, on one connection of its own (e.g. a
/// write and then `WAIT`, which counts only its own connection's writes: a
/// `WAIT` on a connection that wrote nothing returns at once).
pub async fn query_pipe<T: FromRedisValue>(
    addr: SocketAddr,
    pipe: &redis::Pipeline,
) -> RedisResult<T> {
    let attempt = async {
        let mut conn = connection(addr).await?;
        pipe.query_async(&mut conn).await
    };
    match tokio::time::timeout(QUERY_TIMEOUT, attempt).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{addr} did not answer within {QUERY_TIMEOUT:?}"),
        )
        .into()),
    }
}

/// [`query`], preceded by ASKING on the same connection when `asking`.
async fn query_asking<T: FromRedisValue>(
    addr: SocketAddr,
    asking: bool,
    cmd: &redis::Cmd,
) -> RedisResult<T> {
    let attempt = async {
        let mut conn = connection(addr).await?;
        if asking {
            redis::cmd("ASKING").query_async::<()>(&mut conn).await?;
        }
        cmd.query_async(&mut conn).await
    };
    match tokio::time::timeout(QUERY_TIMEOUT, attempt).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{addr} did not answer within {QUERY_TIMEOUT:?}"),
        )
        .into()),
    }
}

/// Asks `probe` every 50 ms until it gives `Ok`, for at most `limit`; then
/// panics with what it said last.
async fn wait_for<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; last: {last}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How many replicas INFO replication on `addr` reports online.
async fn online_replicas(addr: SocketAddr) -> Result<usize, String> {
    let info: String = query(addr, redis::cmd("INFO").arg("replication"))
        .await
        .map_err(|e| format!("INFO replication on {addr}: {e}"))?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count())
}

/// A primary, two replicas and three sentinels monitoring it as
/// [`Sentinel::MASTER_NAME`] with quorum 2, all on loopback.
pub struct Sentinel {
    /// The primary at start, then the replicas.
    data: Vec<Node>,
    sentinels: Vec<Node>,
    /// Data nodes killed so far, last last.
    killed: Vec<SocketAddr>,
}

impl Sentinel {
    /// The name the sentinels monitor the primary by.
    pub const MASTER_NAME: &'static str = "leasehold";
    /// A primary unanswering this long is subjectively down.
    pub const DOWN_AFTER_MS: u64 = 1_000;
    /// Sentinel's failover-timeout: also the time a promotion may take and,
    /// doubled, the pause before a failed failover (a split vote) is tried
    /// again.
    pub const FAILOVER_TIMEOUT_MS: u64 = 4_000;

    /// Starts the primary, its two replicas (waiting until both are in sync)
    /// and three sentinels, and waits until every sentinel knows both
    /// replicas and the two other sentinels: from then on, killing the
    /// primary leads to a failover.
    pub async fn start() -> Self {
        let primary = start_node("sentinel-primary", Vec::new);
        let primary_port = primary.addr.port().to_string();
        let mut data = vec![primary];
        for _ in 0..2 {
            data.push(start_node("sentinel-replica", || {
                vec![
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    primary_port.clone(),
                ]
            }));
        }
        let primary = data[0].addr;
        wait_for(START_LIMIT, "2 replicas in sync", || async move {
            match online_replicas(primary).await? {
                2 => Ok(()),
                n => Err(format!("{n} replicas online")),
            }
        })
        .await;
        // After the replicas: a sentinel learns of them from the primary's
        // INFO, which it asks at once and then only every 10 s.
        let sentinels = (0..3).map(|_| start_sentinel(primary)).collect();
        let topology = Sentinel {
            data,
            sentinels,
            killed: Vec::new(),
        };
        topology.await_sentinels_ready().await;
        topology
    }

    /// Waits until each sentinel names the primary and knows 2 replicas
    /// (connected) and 2 other sentinels (hellos every 2 s).
    async fn await_sentinels_ready(&self) {
        let primary = self.data[0].addr;
        let sentinels = self.sentinel_addrs();
        wait_for(START_LIMIT, "sentinels to know each other", || {
            let sentinels = sentinels.clone();
            async move {
                for sentinel in sentinels {
                    let named = ask_master_addr(sentinel).await?;
                    if named != primary {
                        return Err(format!("{sentinel} names {named}, not {primary}"));
                    }
                    let replicas: Vec<std::collections::HashMap<String, String>> = query(
                        sentinel,
                        redis::cmd("SENTINEL")
                            .arg("REPLICAS")
                            .arg(Self::MASTER_NAME),
                    )
                    .await
                    .map_err(|e| format!("SENTINEL REPLICAS on {sentinel}: {e}"))?;
                    let usable = replicas
                        .iter()
                        .filter(|r| {
                            r.get("flags").is_some_and(|f| {
                                !f.contains("disconnected") && !f.contains("s_down")
                            })
                        })
                        .count();
                    if usable < 2 {
                        return Err(format!("{sentinel} knows {usable} usable replicas"));
                    }
                    let peers: Vec<redis::Value> = query(
                        sentinel,
                        redis::cmd("SENTINEL")
                            .arg("SENTINELS")
                            .arg(Self::MASTER_NAME),
                    )
                    .await
                    .map_err(|e| format!("SENTINEL SENTINELS on {sentinel}: {e}"))?;
                    if peers.len() < 2 {
                        return Err(format!("{sentinel} knows {} other sentinels", peers.len()));
                    }
                }
                Ok(())
            }
        })
        .await;
    }

    /// The master name to give a Sentinel client.
    pub fn master_name(&self) -> &'static str {
        Self::MASTER_NAME
    }

    /// The sentinels' addresses.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(|s| s.addr).collect()
    }

    /// The data nodes' addresses: the first primary, then the replicas.
    pub fn data_addrs(&self) -> Vec<SocketAddr> {
        self.data.iter().map(|n| n.addr).collect()
    }

    /// The current primary, as the first sentinel that answers names it
    /// (during a failover the sentinels may disagree for a moment: see
    /// [`Sentinel::wait_for_new_primary`]).
    pub async fn primary(&self) -> SocketAddr {
        let mut errors = Vec::new();
        for sentinel in self.sentinel_addrs() {
            match ask_master_addr(sentinel).await {
                Ok(addr) => return addr,
                Err(e) => errors.push(e),
            }
        }
        panic!("no sentinel names a primary: {errors:?}");
    }

    /// `redis://127.0.0.1:PORT/` of the current primary (for a plain
    /// connection; a broker on Sentinel gets the sentinels and the name).
    pub async fn primary_url(&self) -> String {
        format!("redis://{}/", self.primary().await)
    }

    /// Kills the current primary with SIGKILL (as the sentinels name it);
    /// returns its address.
    pub async fn kill_primary(&mut self) -> SocketAddr {
        let primary = self.primary().await;
        let node = self
            .data
            .iter_mut()
            .find(|n| n.addr == primary && n.alive())
            .unwrap_or_else(|| panic!("the primary {primary} is not a live node of this topology"));
        node.kill();
        self.killed.push(primary);
        primary
    }

    /// Waits until every sentinel names the same primary, other than the
    /// one last killed, and that server's ROLE is master; returns it. The
    /// failover takes DOWN_AFTER_MS, an election and a promotion: a few
    /// seconds, and twice FAILOVER_TIMEOUT_MS more if an election fails.
    pub async fn wait_for_new_primary(&self, limit: Duration) -> SocketAddr {
        let old = *self
            .killed
            .last()
            .expect("wait_for_new_primary after kill_primary");
        let sentinels = self.sentinel_addrs();
        wait_for(limit, "a sentinel failover", || {
            let sentinels = sentinels.clone();
            async move {
                let mut named = BTreeSet::new();
                for sentinel in sentinels {
                    named.insert(ask_master_addr(sentinel).await?);
                }
                let new = match named.first() {
                    Some(&one) if named.len() == 1 && one != old => one,
                    _ => return Err(format!("the sentinels name {named:?}")),
                };
                let role: Vec<redis::Value> = query(new, &redis::cmd("ROLE"))
                    .await
                    .map_err(|e| format!("ROLE on {new}: {e}"))?;
                match role.first() {
                    Some(redis::Value::BulkString(r)) if r == b"master" => Ok(new),
                    other => Err(format!("{new} has role {other:?}")),
                }
            }
        })
        .await
    }

    /// Waits until the current primary has `n` replicas online (after a
    /// failover the sentinels point the remaining replica at the new
    /// primary; it then resyncs).
    pub async fn await_replicas(&self, n: usize, limit: Duration) {
        let sentinels = self.sentinel_addrs();
        wait_for(limit, &format!("{n} replicas online"), || {
            let sentinels = sentinels.clone();
            async move {
                let primary = ask_master_addr(sentinels[0]).await?;
                match online_replicas(primary).await? {
                    online if online >= n => Ok(()),
                    online => Err(format!("{primary} has {online} replicas online")),
                }
            }
        })
        .await;
    }
}

/// SENTINEL GET-MASTER-ADDR-BY-NAME on `sentinel`.
async fn ask_master_addr(sentinel: SocketAddr) -> Result<SocketAddr, String> {
    let named: Option<(String, String)> = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Sentinel::MASTER_NAME),
    )
    .await
    .map_err(|e| format!("SENTINEL GET-MASTER-ADDR-BY-NAME on {sentinel}: {e}"))?;
    let (ip, port) = named.ok_or_else(|| format!("{sentinel} knows no master"))?;
    parse_addr(&format!("{ip}:{port}")).ok_or_else(|| format!("{sentinel} names {ip}:{port}"))
}

/// A sentinel monitoring `primary`, on a free port, with its own
/// (rewritable) configuration file.
fn start_sentinel(primary: SocketAddr) -> Node {
    for _ in 0..5 {
        let port = unused_port();
        let dir = fresh_dir("sentinel", port);
        let conf = dir.join("sentinel.conf");
        let name = Sentinel::MASTER_NAME;
        std::fs::write(
            &conf,
            format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 daemonize no\n\
                 dir {dir}\n\
                 sentinel monitor {name} {ip} {primary_port} 2\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 2\n",
                dir = dir.display(),
                ip = primary.ip(),
                primary_port = primary.port(),
                down = Sentinel::DOWN_AFTER_MS,
                failover = Sentinel::FAILOVER_TIMEOUT_MS,
            ),
        )
        .expect("write sentinel.conf");
        let mut command = Command::new(redis_binary());
        command.arg(&conf).arg("--sentinel");
        // Sentinel mode logs no "Ready to accept connections"; its ID comes
        // once it listens.
        if let Some(child) = spawn_until(command, "Sentinel ID is") {
            return Node {
                addr: loopback(port),
                dir,
                child: Some(child),
            };
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("redis-server --sentinel did not start on any of 5 free ports");
}

/// A Redis Cluster: cluster-enabled redis-servers on loopback, joined by
/// `redis-cli --cluster create`, with a node timeout of
/// [`Cluster::NODE_TIMEOUT_MS`].
pub struct Cluster {
    nodes: Vec<Node>,
}

/// One line of CLUSTER NODES.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// The node's ID (40 hex characters), as replicas name their primary.
    pub id: String,
    /// Where it takes clients (`ip:port`; the cluster bus port left out).
    pub addr: SocketAddr,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, ...
    pub flags: Vec<String>,
    /// The primary's ID, for a replica.
    pub primary_id: Option<String>,
    /// Slot ranges served (inclusive); importing/migrating marks left out.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    /// Flagged a primary (`master`) by the node asked.
    pub fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Flagged failing (`fail`) or suspected (`fail?`) by the node asked.
    pub fn is_failing(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    /// Whether `slot` is in one of the ranges it serves.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

/// Parses CLUSTER NODES; lines without a usable address (a node in
/// handshake) are left out.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let addr = parse_addr(fields[1].split('@').next()?)?;
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            Some(ClusterNode {
                id: fields[0].to_owned(),
                addr,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                primary_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// Who serves which slots, and which live node replicates which, as one
/// node sees it.
#[derive(Debug, PartialEq)]
struct ClusterLayout {
    /// (first slot, last slot, primary), sorted.
    slots: Vec<(u16, u16, SocketAddr)>,
    /// (replica, its primary) for the live replicas, sorted.
    replicas: Vec<(SocketAddr, SocketAddr)>,
}

impl ClusterLayout {
    fn of(view: &[ClusterNode], live: &[SocketAddr]) -> Self {
        let mut slots: Vec<_> = view
            .iter()
            .filter(|n| n.is_primary())
            .flat_map(|n| n.slots.iter().map(|&(lo, hi)| (lo, hi, n.addr)))
            .collect();
        slots.sort();
        let mut replicas: Vec<_> = view
            .iter()
            .filter(|n| live.contains(&n.addr) && !n.is_primary())
            .filter_map(|n| {
                let id = n.primary_id.as_ref()?;
                let primary = view.iter().find(|p| &p.id == id)?;
                Some((n.addr, primary.addr))
            })
            .collect();
        replicas.sort();
        ClusterLayout { slots, replicas }
    }
}

/// A slot between MIGRATING on its owner and IMPORTING on its new owner:
/// the owner answers ASK for keys of the slot it no longer has. Finish it
/// with [`Cluster::finish_slot_migration`].
#[derive(Debug, Clone)]
pub struct SlotMigration {
    /// The slot being moved.
    pub slot: u16,
    /// Its owner until the migration finishes (MIGRATING).
    pub from: SocketAddr,
    /// The primary it moves to (IMPORTING).
    pub to: SocketAddr,
    from_id: String,
    to_id: String,
}

impl Cluster {
    /// Node timeout (`cluster-node-timeout`): a primary unanswering this long
    /// is suspected, then failed over to a replica (a few seconds in all).
    pub const NODE_TIMEOUT_MS: u64 = 2_000;
    /// Slots in every Redis Cluster.
    pub const SLOTS: u32 = 16_384;

    /// Starts `primaries * (1 + replicas_per_primary)` cluster-enabled
    /// servers, creates the cluster over them with `redis-cli --cluster
    /// create ... --cluster-replicas N --cluster-yes`, and waits until every
    /// node reports cluster_state:ok and agrees on who serves each slot, and
    /// every replica is in sync with its primary.
    pub async fn start(primaries: usize, replicas_per_primary: usize) -> Self {
        assert!(
            primaries >= 3,
            "redis-cli --cluster create needs at least 3 primaries"
        );
        let timeout = Self::NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<Node> = (0..primaries * (1 + replicas_per_primary))
            .map(|_| {
                start_node("cluster", || {
                    vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        "nodes.conf".into(),
                        "--cluster-node-timeout".into(),
                        timeout.clone(),
                        // Its own free bus port: port + 10000 may not exist.
                        "--cluster-port".into(),
                        unused_port().to_string(),
                    ]
                })
            })
            .collect();
        let mut create = tokio::process::Command::new(redis_cli());
        create
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| n.addr.to_string()))
            .args(["--cluster-replicas", &replicas_per_primary.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(START_LIMIT, create.output())
            .await
            .expect("redis-cli --cluster create finishes")
            .unwrap_or_else(|e| panic!("cannot run '{}' ({e}): install redis-tools", redis_cli()));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Cluster { nodes };
        cluster
            .wait_until_settled(START_LIMIT, Some(primaries * replicas_per_primary))
            .await;
        cluster.await_replicas_synced(START_LIMIT).await;
        cluster
    }

    /// Every node's address, in start order (index = [`Cluster::kill_node`]'s).
    pub fn node_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.addr).collect()
    }

    /// The addresses of the nodes not killed.
    pub fn live_addrs(&self) -> Vec<SocketAddr> {
        self.nodes
            .iter()
            .filter(|n| n.alive())
            .map(|n| n.addr)
            .collect()
    }

    /// `redis://127.0.0.1:PORT/` of every live node: seeds for a cluster
    /// client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.live_addrs()
            .iter()
            .map(|a| format!("redis://{a}/"))
            .collect()
    }

    /// The index of the node at `addr`.
    pub fn index_of(&self, addr: SocketAddr) -> usize {
        self.nodes
            .iter()
            .position(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("{addr} is no node of this cluster"))
    }

    /// Kills node `i` with SIGKILL; returns its address.
    pub fn kill_node(&mut self, i: usize) -> SocketAddr {
        self.nodes[i].kill();
        self.nodes[i].addr
    }

    /// CLUSTER NODES as the first live node that answers sees it.
    pub async fn view(&self) -> Vec<ClusterNode> {
        let mut errors = Vec::new();
        for addr in self.live_addrs() {
            match query::<String>(addr, redis::cmd("CLUSTER").arg("NODES")).await {
                Ok(text) => return parse_cluster_nodes(&text),
                Err(e) => errors.push(format!("{addr}: {e}")),
            }
        }
        panic!("no live node answers CLUSTER NODES: {errors:?}");
    }

    /// The primaries serving slots (not failing), by address.
    pub async fn primaries(&self) -> Vec<SocketAddr> {
        let mut primaries: Vec<SocketAddr> = self
            .view()
            .await
            .into_iter()
            .filter(|n| n.is_primary() && !n.is_failing() && !n.slots.is_empty())
            .map(|n| n.addr)
            .collect();
        primaries.sort();
        primaries
    }

    /// The replicas of the primary at `primary`.
    pub async fn replicas_of(&self, primary: SocketAddr) -> Vec<SocketAddr> {
        let view = self.view().await;
        let id = &view
            .iter()
            .find(|n| n.addr == primary)
            .unwrap_or_else(|| panic!("{primary} is not in CLUSTER NODES"))
            .id;
        view.iter()
            .filter(|n| n.primary_id.as_ref() == Some(id))
            .map(|n| n.addr)
            .collect()
    }

    /// The hash slot of `key` (CLUSTER KEYSLOT).
    pub async fn slot_of(&self, key: &str) -> u16 {
        let addr = self.live_addrs()[0];
        query(addr, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .await
            .expect("CLUSTER KEYSLOT")
    }

    /// The primary serving `slot`, as CLUSTER NODES says.
    pub async fn owner_of_slot(&self, slot: u16) -> SocketAddr {
        self.view()
            .await
            .into_iter()
            .find(|n| n.is_primary() && n.serves(slot))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
            .addr
    }

    /// The live primary that has `key` in its data (EXISTS after ASKING on
    /// each: this finds a key on either side of a slot being migrated; the
    /// others answer MOVED, or ASK from a migrating slot's old owner).
    pub async fn holder_of(&self, key: &str) -> Option<SocketAddr> {
        for addr in self.primaries().await {
            match query_asking::<i64>(addr, true, redis::cmd("EXISTS").arg(key)).await {
                Ok(1) => return Some(addr),
                Ok(_) => {}
                // Not its slot; or its slot is migrating and the key is not here.
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
                    ) => {}
                Err(e) => panic!("EXISTS {key} on {addr}: {e}"),
            }
        }
        None
    }

    /// Runs `cmd` as a cluster client would: at a live node first, then
    /// wherever MOVED sends it, with ASKING where ASK sends it; retried
    /// while the cluster is down or a migrating slot says TRYAGAIN, for up
    /// to 10 s.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut at = self.live_addrs()[0];
        let mut asking = false;
        loop {
            let result = query_asking(at, asking, cmd).await;
            asking = false;
            let Err(e) = &result else { return result };
            match e.kind() {
                redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
                    asking = e.kind() == redis::ErrorKind::Server(ServerErrorKind::Ask);
                    at = e
                        .redirect_node()
                        .and_then(|(addr, _)| parse_addr(addr))
                        .ok_or_else(|| e.clone())?;
                }
                redis::ErrorKind::Server(
                    ServerErrorKind::ClusterDown | ServerErrorKind::TryAgain,
                ) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
                _ => return result,
            }
            if Instant::now() >= deadline {
                return result;
            }
        }
    }

    /// Waits until every live node reports cluster_state:ok, all 16384 slots
    /// are served by live primaries, and the live nodes agree on who serves
    /// each and on which live node replicates which. After a kill this holds
    /// only once the dead primary's slots have moved to a replica (with no
    /// replica, it never holds again).
    pub async fn wait_until_ok(&self, limit: Duration) {
        self.wait_until_settled(limit, None).await;
    }

    /// [`Cluster::wait_until_ok`], and with `replicas` live replicas known
    /// to every node when given (they are learnt by gossip after `redis-cli`
    /// makes them replicas).
    async fn wait_until_settled(&self, limit: Duration, replicas: Option<usize>) {
        let live = self.live_addrs();
        wait_for(limit, "cluster_state:ok on every live node", || {
            let live = live.clone();
            async move {
                let mut agreed: Option<ClusterLayout> = None;
                for &addr in &live {
                    let info: String = query(addr, redis::cmd("CLUSTER").arg("INFO"))
                        .await
                        .map_err(|e| format!("CLUSTER INFO on {addr}: {e}"))?;
                    if !info.contains("cluster_state:ok") {
                        return Err(format!("{addr} reports\n{info}"));
                    }
                    let text: String = query(addr, redis::cmd("CLUSTER").arg("NODES"))
                        .await
                        .map_err(|e| format!("CLUSTER NODES on {addr}: {e}"))?;
                    let layout = ClusterLayout::of(&parse_cluster_nodes(&text), &live);
                    let covered: u32 = layout
                        .slots
                        .iter()
                        .map(|&(lo, hi, _)| u32::from(hi - lo) + 1)
                        .sum();
                    if covered != Self::SLOTS {
                        return Err(format!("{addr} sees {covered} slots served:\n{text}"));
                    }
                    if let Some(&(_, _, dead)) =
                        layout.slots.iter().find(|(_, _, a)| !live.contains(a))
                    {
                        return Err(format!("{addr} has the dead {dead} serving slots:\n{text}"));
                    }
                    if replicas.is_some_and(|n| layout.replicas.len() != n) {
                        return Err(format!("{addr} knows replicas {:?}", layout.replicas));
                    }
                    match &agreed {
                        None => agreed = Some(layout),
                        Some(first) if *first == layout => {}
                        Some(first) => {
                            return Err(format!(
                                "{addr} sees {layout:?}, {} sees {first:?}",
                                live[0]
                            ))
                        }
                    }
                }
                Ok(())
            }
        })
        .await;
    }

    /// Waits until every live replica's link to its primary is up.
    pub async fn await_replicas_synced(&self, limit: Duration) {
        let live = self.live_addrs();
        wait_for(limit, "replicas in sync", || {
            let live = live.clone();
            async move {
                for &addr in &live {
                    let info: String = query(addr, redis::cmd("INFO").arg("replication"))
                        .await
                        .map_err(|e| format!("INFO replication on {addr}: {e}"))?;
                    if info.contains("role:slave") && !info.contains("master_link_status:up") {
                        return Err(format!("{addr} is not in sync:\n{info}"));
                    }
                }
                Ok(())
            }
        })
        .await;
    }

    /// Marks `slot` MIGRATING on its owner and IMPORTING on the primary at
    /// `to`; no key moves yet.
    pub async fn start_slot_migration(&self, slot: u16, to: SocketAddr) -> SlotMigration {
        let view = self.view().await;
        let owner = view
            .iter()
            .find(|n| n.is_primary() && n.serves(slot))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"));
        let target = view
            .iter()
            .find(|n| n.addr == to && n.is_primary())
            .unwrap_or_else(|| panic!("{to} is not a primary"));
        assert_ne!(owner.addr, to, "slot {slot} is on {to} already");
        let migration = SlotMigration {
            slot,
            from: owner.addr,
            to,
            from_id: owner.id.clone(),
            to_id: target.id.clone(),
        };
        let setslot = |state: &str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
            cmd
        };
        // Importing first, so that an ASK from the owner finds it ready.
        query::<()>(to, &setslot("IMPORTING", &migration.from_id))
            .await
            .expect("SETSLOT IMPORTING");
        query::<()>(migration.from, &setslot("MIGRATING", &migration.to_id))
            .await
            .expect("SETSLOT MIGRATING");
        migration
    }

    /// Moves one key of a slot being migrated to its new owner (MIGRATE);
    /// the slot stays MIGRATING/IMPORTING. Nothing happens if the key is
    /// not (or no longer) on the old owner.
    pub async fn migrate_key(&self, migration: &SlotMigration, key: &str) {
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg(migration.to.ip().to_string())
            .arg(migration.to.port())
            .arg(key)
            .arg(0)
            .arg(5_000);
        // "NOKEY" (a simple string) when the key is not there.
        query::<redis::Value>(migration.from, &migrate)
            .await
            .unwrap_or_else(|e| panic!("MIGRATE {key}: {e}"));
    }

    /// Moves the slot's keys (MIGRATE, 100 at a time), assigns the slot to
    /// its new owner (SETSLOT NODE on it, the old owner and every other
    /// primary) and waits until every live node says so.
    pub async fn finish_slot_migration(&self, migration: &SlotMigration) {
        let SlotMigration { slot, from, to, .. } = *migration;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let keys: Vec<Vec<u8>> = query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            )
            .await
            .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "slot {slot} never emptied");
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg(to.ip().to_string())
                .arg(to.port())
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&keys);
            query::<()>(from, &migrate).await.expect("MIGRATE");
        }
        let node = {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&migration.to_id);
            cmd
        };
        query::<()>(to, &node)
            .await
            .expect("SETSLOT NODE on the new owner");
        query::<()>(from, &node)
            .await
            .expect("SETSLOT NODE on the old owner");
        for primary in self.primaries().await {
            if primary != to && primary != from {
                // Gossip would tell it too; this is sooner.
                let _ = query::<()>(primary, &node).await;
            }
        }
        let live = self.live_addrs();
        wait_for(
            Duration::from_secs(30),
            &format!("every node to see slot {slot} on {to}"),
            || {
                let live = live.clone();
                async move {
                    for &addr in &live {
                        let text: String = query(addr, redis::cmd("CLUSTER").arg("NODES"))
                            .await
                            .map_err(|e| format!("CLUSTER NODES on {addr}: {e}"))?;
                        let owner = parse_cluster_nodes(&text)
                            .into_iter()
                            .find(|n| n.is_primary() && n.serves(slot))
                            .map(|n| n.addr);
                        if owner != Some(to) {
                            return Err(format!("{addr} sees slot {slot} on {owner:?}"));
                        }
                    }
                    Ok(())
                }
            },
        )
        .await;
    }

    /// Moves `slot` with its keys to the primary at `to`.
    pub async fn migrate_slot(&self, slot: u16, to: SocketAddr) -> SlotMigration {
        let migration = self.start_slot_migration(slot, to).await;
        self.finish_slot_migration(&migration).await;
        migration
    }

    /// Moves the slot of `key` (with every key of that slot) to the primary
    /// at `to`.
    pub async fn migrate_key_slot(&self, key: &str, to: SocketAddr) -> SlotMigration {
        let slot = self.slot_of(key).await;
        self.migrate_slot(slot, to).await
    }
}
