//! The shared harness of the integration tests in `tests/`: a real
//! `redis-server` on a free loopback port (and Sentinel and Cluster
//! topologies, `topology`), brokers served in-process on `127.0.0.1:0`
//! listeners or as `leasehold serve` processes, certificates (`certs`), a
//! TCP proxy that stalls, drops or delays connections (`proxy`), network
//! partitions of a broker run in a namespace of its own (`netns`), KeepAlive
//! streams driven heartbeat by heartbeat (`keepalive`), and the
//! history checker of the lease contract (`history`) with the contended run
//! the topology tests feed it (`contract`), and a headless Chromium driven
//! over the DevTools protocol (`browser`). A crate of its own,
//! compiled once for every test binary; each test file names it `common`.

pub mod backends;
pub mod browser;
pub mod certs;
pub mod contract;
pub mod etcd;
pub mod history;
pub mod keepalive;
pub mod lock;
pub mod model;
pub mod netns;
pub mod outage;
pub mod postgres;
pub mod proxy;
pub mod tenants;
pub mod topology;
pub mod zookeeper;

use std::{
    io::{BufRead, BufReader},
    net::{SocketAddr, TcpListener as StdListener},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use leasehold_server::{
    config::ServeConfig,
    proto::{leasehold_service_client::LeaseholdServiceClient, AcquireRequest, Lease},
};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;

pub use self::{
    etcd::{EtcdCluster, EtcdServer},
    netns::NetNs,
    postgres::PostgresServer,
    zookeeper::{ZooKeeperEnsemble, ZooKeeperServer},
};

/// The redis-server binary: `$LEASEHOLD_REDIS_SERVER`, or `redis-server` on
/// the PATH (`scripts/test` installs it).
fn redis_binary() -> String {
    std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A child's process id (`Child::id`, a u32) as kill(2) takes it: checked,
/// not cast, since a pid wrapped negative would signal a whole process group
/// (and -1 every process the user may signal).
pub(crate) fn as_pid(id: u32) -> libc::pid_t {
    libc::pid_t::try_from(id).expect("a process id fits pid_t (pid_max is at most 2^22)")
}

/// The `leasehold` binary that Cargo built for the integration tests:
/// `$LEASEHOLD_BIN`, else beside the test binary's folder (`target/<profile>/`,
/// the test being in `target/<profile>/deps/`).
pub fn leasehold_binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("LEASEHOLD_BIN") {
        return path.into();
    }
    let test = std::env::current_exe().expect("the test binary's path");
    let profile = test
        .parent()
        .and_then(std::path::Path::parent)
        .expect("a test binary in target/<profile>/deps/");
    let binary = profile.join("leasehold");
    assert!(
        binary.exists(),
        "{} not found: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN",
        binary.display()
    );
    binary
}

/// The broker as it was before Redis lease record format 2, for rolling
/// updates: `$LEASEHOLD_PREVIOUS_BIN`, else what `scripts/previous-broker`
/// builds (from this clone's history, in a target folder of its own; run
/// here, under a lock, when it has not been yet: `scripts/test` runs it
/// before the suite).
pub fn previous_broker_binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("LEASEHOLD_PREVIOUS_BIN") {
        return path.into();
    }
    let _one_build = lock::FileLock::acquire("previous-broker");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = Command::new(root.join("scripts/previous-broker"))
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/previous-broker");
    assert!(
        built.status.success(),
        "scripts/previous-broker failed: {}",
        built.status
    );
    String::from_utf8(built.stdout)
        .expect("a path")
        .trim()
        .into()
}

/// The wall clock in milliseconds since 1970 (as the stores' records
/// keep it).
pub fn unix_ms() -> u64 {
    leasehold_server::duration::millis(since_1970())
}

/// The wall clock in microseconds since 1970 (as fences drawn from a clock
/// are).
pub fn unix_us() -> u64 {
    leasehold_server::duration::micros(since_1970())
}

fn since_1970() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the wall clock is after 1970")
}

/// How long a port handed out by [`free_port`] stays out of every other
/// test process's hands. Tests run in processes of their own, several at
/// once (`cargo nextest`): without this, a port one test's server was just
/// killed on (or has not started on yet) could be handed to another test,
/// whose server would then answer the first test's reconnecting clients.
/// Longer than any test runs; the ports a whole run hands out are a small
/// part of the ephemeral range.
const PORT_QUARANTINE: Duration = Duration::from_secs(600);

/// A loopback port free right now, and handed out by no test process of
/// this user in the last [`PORT_QUARANTINE`] (a file of recent ports in the
/// temporary directory, under a [`lock::FileLock`]).
pub fn free_port() -> u16 {
    let _lock = lock::FileLock::acquire("ports");
    // SAFETY: geteuid has no preconditions.
    let path = std::env::temp_dir().join(format!("leasehold-ports-{}", unsafe { libc::geteuid() }));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut recent: Vec<(u16, u64)> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (port, at) = line.split_once(' ')?;
            Some((port.parse().ok()?, at.parse().ok()?))
        })
        .filter(|&(_, at)| now.saturating_sub(at) < PORT_QUARANTINE.as_secs())
        .collect();
    let port = loop {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if recent.iter().all(|&(p, _)| p != port) {
            break port;
        }
    };
    recent.push((port, now));
    let text: String = recent.iter().map(|(p, at)| format!("{p} {at}\n")).collect();
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    port
}

/// A fresh directory for a redis-server's data files (its append-only
/// file), under the temporary directory.
fn data_dir() -> String {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-redis-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir.to_string_lossy().into_owned()
}

/// A redis-server child process, killed on drop. No persistence: a restart
/// comes back empty, like a Redis that lost its data.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    /// For a server under libfaketime: the file holding its clock's offset.
    clock: Option<std::path::PathBuf>,
}

/// libfaketime from Debian's `libfaketime` package (`scripts/test` installs
/// `faketime`, which pulls it in), or `$LEASEHOLD_LIBFAKETIME`.
fn libfaketime() -> String {
    if let Ok(path) = std::env::var("LEASEHOLD_LIBFAKETIME") {
        return path;
    }
    let candidates = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .chain([std::path::PathBuf::from(
            "/usr/lib/faketime/libfaketime.so.1",
        )]);
    for candidate in candidates {
        if candidate.exists() {
            return candidate.to_string_lossy().into_owned();
        }
    }
    panic!(
        "libfaketime.so.1 not found under /usr/lib: install Debian's faketime package \
         (scripts/test does) or set LEASEHOLD_LIBFAKETIME"
    );
}

/// The C library the dynamic loader uses (for [`faketime_env`]).
fn libc_path() -> String {
    let candidates = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("libc.so.6"))
        .chain([
            "/lib/x86_64-linux-gnu/libc.so.6".into(),
            "/lib64/libc.so.6".into(),
        ]);
    for candidate in candidates {
        if candidate.exists() {
            return candidate.to_string_lossy().into_owned();
        }
    }
    panic!("libc.so.6 not found under /usr/lib");
}

/// The environment that runs redis-server under libfaketime with its wall
/// clock offset by what `clock` holds (`+0`, `-3600`, `+10`: seconds),
/// re-read at every call, so that writing the file steps the running
/// server's clock. Redis 7 takes both `TIME` and key expiry from the wall
/// clock (gettimeofday / CLOCK_REALTIME), which is what moves; the
/// monotonic clock (its timers) is left alone, as an NTP step leaves it.
///
/// glibc is preloaded after libfaketime: libfaketime 0.9.10 cannot start
/// inside jemalloc, Debian's Redis allocator (jemalloc reads the clock
/// while libfaketime, initialising, allocates: libfaketime issue #130), so
/// malloc goes to glibc's allocator instead. That changes nothing the tests
/// look at.
pub(crate) fn faketime_env(clock: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", format!("{}:{}", libfaketime(), libc_path())),
        (
            "FAKETIME_TIMESTAMP_FILE",
            clock.to_string_lossy().into_owned(),
        ),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

/// Writes `seconds` (from the true time) into a libfaketime clock file
/// ([`faketime_env`]), whole and renamed into place, so that no clock call
/// reads a half-written file.
pub(crate) fn write_clock_offset(clock: &std::path::Path, seconds: i64) {
    let next = clock.with_extension("next");
    std::fs::write(&next, format!("{seconds:+}\n")).expect("write the faketime file");
    std::fs::rename(&next, clock).expect("replace the faketime file");
}

impl RedisServer {
    /// Starts redis-server on a free loopback port and waits until it accepts
    /// connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts redis-server with an append-only file (fsync on every write) in
    /// a fresh directory, so that a restart keeps the data.
    pub fn start_persistent() -> Self {
        let dir = data_dir();
        Self::start_with(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir,
        ])
    }

    /// Starts redis-server listening on `ips` besides 127.0.0.1: the root
    /// side of a [`NetNs`]'s pair ([`NetNs::host_ip`]), for a broker inside
    /// the namespace, which has a loopback of its own; it connects to
    /// [`RedisServer::url_at`]. Protected mode is off, since it turns away
    /// every client not on loopback while no password is set; the extra
    /// addresses are the test's own private pairs. Restarts keep them.
    pub fn start_bound(ips: &[std::net::IpAddr]) -> Self {
        let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
        let mut args = vec!["--protected-mode", "no", "--bind", "127.0.0.1"];
        args.extend(ips.iter().map(String::as_str));
        Self::start_with(&args)
    }

    /// Starts redis-server as the model checker runs it: its data fsync'd
    /// to an append-only file (as [`RedisServer::start_persistent`]), its
    /// clock under libfaketime (as [`RedisServer::start_faketime`]), and
    /// listening on `ips` besides 127.0.0.1 (as
    /// [`RedisServer::start_bound`]).
    pub fn start_for_model(ips: &[std::net::IpAddr]) -> Self {
        let dir = data_dir();
        let clock = std::env::temp_dir().join(format!(
            "leasehold-faketime-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::write(&clock, "+0\n").expect("write the faketime file");
        let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
        let mut args = vec![
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir,
            "--protected-mode",
            "no",
            "--bind",
            "127.0.0.1",
        ];
        args.extend(ips.iter().map(String::as_str));
        Self::start_clocked(&args, Some(clock))
    }

    /// Starts redis-server accepting `DEBUG` (e.g. `DEBUG SLEEP`, to stall
    /// it) from loopback clients.
    pub fn start_debuggable() -> Self {
        Self::start_with(&["--enable-debug-command", "local"])
    }

    /// Starts redis-server that requires `password` (`requirepass`); connect
    /// with [`RedisServer::url_with_password`].
    pub fn start_with_password(password: &str) -> Self {
        Self::start_with(&["--requirepass", password])
    }

    /// Starts redis-server speaking TLS only (no plaintext port), with the
    /// given certificate, key and client CA files (clients must present a
    /// certificate from that CA), and `extra` settings. Its port is
    /// [`RedisServer::port`]: `rediss://127.0.0.1:PORT/`.
    pub fn start_tls(cert: &str, key: &str, ca: &str, extra: &[&str]) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let tls_port = port.to_string();
            let mut args = vec![
                "--port",
                "0",
                "--tls-port",
                &tls_port,
                "--tls-cert-file",
                cert,
                "--tls-key-file",
                key,
                "--tls-ca-cert-file",
                ca,
            ];
            args.extend_from_slice(extra);
            if let Some(child) = spawn_redis(port, &args) {
                return RedisServer {
                    port,
                    child: Some(child),
                    extra: args.iter().map(ToString::to_string).collect(),
                    clock: None,
                };
            }
        }
        panic!("redis-server (TLS) did not start on any of 5 free ports");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://:PASSWORD@127.0.0.1:PORT/`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{}/", self.port)
    }

    /// Starts a replica of `primary` (it syncs in the background; see
    /// [`RedisServer::await_replicas`]).
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        Self::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()])
    }

    fn start_with(extra: &[&str]) -> Self {
        Self::start_clocked(extra, None)
    }

    fn start_clocked(extra: &[&str], clock: Option<std::path::PathBuf>) -> Self {
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn_redis_with(port, extra, clock.as_deref()) {
                let extra = extra.iter().map(ToString::to_string).collect();
                return RedisServer {
                    port,
                    child: Some(child),
                    extra,
                    clock,
                };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// Starts redis-server under libfaketime, its clock right for now: step
    /// it with [`RedisServer::set_clock_offset`] while it runs (as NTP
    /// stepping the host's clock would). A restart keeps the offset.
    pub fn start_faketime() -> Self {
        let clock = std::env::temp_dir().join(format!(
            "leasehold-faketime-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::write(&clock, "+0\n").expect("write the faketime file");
        Self::start_clocked(&[], Some(clock))
    }

    /// Sets the server's clock to `seconds` from the true time (negative:
    /// behind), at once: libfaketime reads the offset at every clock call.
    /// Only for a server from [`RedisServer::start_faketime`].
    pub fn set_clock_offset(&self, seconds: i64) {
        let clock = self
            .clock
            .as_ref()
            .expect("set_clock_offset needs RedisServer::start_faketime");
        write_clock_offset(clock, seconds);
    }

    /// Waits until `n` replicas are connected and in sync with this server.
    pub async fn await_replicas(&self, n: usize) {
        let mut conn = self.connection().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .unwrap();
            let online = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count();
            if online >= n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replicas never came online:\n{info}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `redis://IP:PORT/`: for a server of [`RedisServer::start_bound`]
    /// reached on one of its extra addresses.
    pub fn url_at(&self, ip: std::net::IpAddr) -> String {
        format!("redis://{ip}:{}/", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..50 {
            let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
            if let Some(child) = spawn_redis_with(self.port, &extra, self.clock.as_deref()) {
                self.child = Some(child);
                return;
            }
            // The port can linger briefly after the kill.
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// A plain connection for inspecting or tampering with the data.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// Sets the server's eviction: a 100 MB memory limit with `policy`
    /// (`volatile-lru`, as managed services default to), or none
    /// (`None`: no limit, `noeviction`): a store the broker refuses as
    /// unsafe, and the fix.
    pub async fn set_eviction(&self, policy: Option<&str>) {
        let (maxmemory, policy) = match policy {
            Some(policy) => ("100mb", policy),
            None => ("0", "noeviction"),
        };
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(maxmemory)
            .arg("maxmemory-policy")
            .arg(policy)
            .query_async(&mut self.connection().await)
            .await
            .expect("CONFIG SET");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(clock) = &self.clock {
            let _ = std::fs::remove_file(clock);
        }
    }
}

/// Spawns redis-server and waits for its "Ready to accept connections" line;
/// `None` if it exited first (port taken).
fn spawn_redis(port: u16, extra: &[&str]) -> Option<Child> {
    spawn_redis_with(port, extra, None)
}

/// [`spawn_redis`], under libfaketime reading its offset from `clock` when
/// given.
fn spawn_redis_with(port: u16, extra: &[&str], clock: Option<&std::path::Path>) -> Option<Child> {
    let mut command = Command::new(redis_binary());
    if let Some(clock) = clock {
        command.envs(faketime_env(clock));
    }
    command
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "notice",
        ])
        // After the defaults, so that they override them.
        .args(extra);
    spawn_until(command, "Ready to accept connections")
}

/// Runs `command` (a redis-server) with its stdout piped and waits for a
/// line containing `ready`; `None` if it exited first (its port was taken).
fn spawn_until(mut command: Command, ready: &'static str) -> Option<Child> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run '{}' ({e}): install redis-server (scripts/test does) \
                 or set LEASEHOLD_REDIS_SERVER",
                redis_binary()
            )
        });
    let stdout = child.stdout.take().expect("piped stdout");
    ready_when(child, stdout, ready, Duration::from_secs(20))
}

/// Waits until `child` writes a line containing `ready` to `output` (its
/// piped stdout or stderr), draining the rest in a thread so that the
/// server never blocks on a full pipe. `None`, the child killed, if no
/// such line came within `limit` (it exited first: its port was taken).
pub(crate) fn ready_when(
    mut child: Child,
    output: impl std::io::Read + Send + 'static,
    ready: &'static str,
    limit: Duration,
) -> Option<Child> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if line.contains(ready) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    match rx.recv_timeout(limit) {
        Ok(()) => Some(child),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// A broker served in-process until dropped or stopped.
pub struct Broker {
    /// gRPC address.
    pub addr: SocketAddr,
    /// HTTP metrics address.
    pub metrics_addr: SocketAddr,
    /// The HTTP/JSON API's address, when the config asked for one
    /// (`http_listen`: port 0 is bound here, and this says which port).
    pub http_addr: Option<SocketAddr>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<leasehold_server::Result<()>>>,
}

impl Broker {
    /// A broker on `store` with default settings, checking the store's
    /// health every 100 ms.
    pub async fn start(store: &str) -> Self {
        Self::start_with(store, |_| {}).await
    }

    /// A broker on `store`, with `adjust` applied to the default config.
    pub async fn start_with(store: &str, adjust: impl FnOnce(&mut ServeConfig)) -> Self {
        let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind grpc");
        Self::serve(grpc, store, adjust).await
    }

    /// A broker on `store` serving at `addr` (e.g. where a stopped broker
    /// served: a restart).
    pub async fn start_at(addr: SocketAddr, store: &str) -> Self {
        let grpc = TcpListener::bind(addr).await.expect("bind the old address");
        Self::serve(grpc, store, |_| {}).await
    }

    async fn serve(grpc: TcpListener, store: &str, adjust: impl FnOnce(&mut ServeConfig)) -> Self {
        let metrics = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind metrics");
        let addr = grpc.local_addr().unwrap();
        let metrics_addr = metrics.local_addr().unwrap();
        let mut config = ServeConfig::new(addr, metrics_addr, store);
        config.key_prefix = "test:".into();
        config.health_interval = Duration::from_millis(100);
        adjust(&mut config);
        let http = match config.http_listen {
            Some(addr) => Some(TcpListener::bind(addr).await.expect("bind the HTTP API")),
            None => None,
        };
        let http_addr = http.as_ref().map(|l| l.local_addr().unwrap());
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(leasehold_server::service::run_listening(
            grpc,
            metrics,
            http,
            config,
            async {
                let _ = rx.await;
            },
        ));
        Broker {
            addr,
            metrics_addr,
            http_addr,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client connected to this broker.
    pub async fn client(&self) -> LeaseholdServiceClient<Channel> {
        LeaseholdServiceClient::new(self.channel().await)
    }

    /// A channel to this broker (retrying the connect for up to 5 s while
    /// the server task starts).
    pub async fn channel(&self) -> Channel {
        let endpoint = Channel::from_shared(self.url()).expect("valid URL");
        let mut last = None;
        for _ in 0..50 {
            match endpoint.connect().await {
                Ok(channel) => return channel,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cannot connect to the broker at {}: {last:?}", self.addr);
    }

    /// Shuts the broker down gracefully and waits for it.
    pub async fn stop(mut self) -> leasehold_server::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task
            .take()
            .expect("running")
            .await
            .expect("server task")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A broker as a separate `leasehold serve` process (for tests that kill it
/// with SIGKILL); killed on drop.
pub struct BrokerProcess {
    /// gRPC address.
    pub addr: SocketAddr,
    /// Metrics address.
    pub metrics_addr: SocketAddr,
    launch: Launch,
    child: Child,
}

/// How a [`BrokerProcess`] is started (again, on restart).
struct Launch {
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    store: String,
    extra: Vec<String>,
    /// The network namespace it runs in ([`BrokerProcess::start_in`]), by
    /// name; `None`: the test's own.
    netns: Option<String>,
    /// Where its stderr (the logs, at `RUST_LOG`, default `debug`) is
    /// appended; `None` discards them.
    log: Option<std::path::PathBuf>,
    /// The binary; `None`: [`leasehold_binary`].
    binary: Option<std::path::PathBuf>,
}

impl Launch {
    /// A broker in this network namespace, on free loopback ports.
    fn on_loopback(
        store: &str,
        extra: &[&str],
        log: Option<&std::path::Path>,
        binary: Option<std::path::PathBuf>,
    ) -> Launch {
        Launch {
            addr: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            metrics_addr: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            store: store.to_owned(),
            extra: extra.iter().map(ToString::to_string).collect(),
            netns: None,
            log: log.map(ToOwned::to_owned),
            binary,
        }
    }
}

impl BrokerProcess {
    /// Starts `leasehold serve` on `store` and waits until it accepts calls.
    pub async fn start(store: &str) -> Self {
        Self::start_logged(store, &[], None).await
    }

    /// Starts `leasehold serve` on `store` with `extra` flags, its logs
    /// appended to `log` when given.
    pub async fn start_logged(store: &str, extra: &[&str], log: Option<&std::path::Path>) -> Self {
        Self::launch(Launch::on_loopback(store, extra, log, None)).await
    }

    /// Starts the broker of [`previous_broker_binary`] (before Redis lease
    /// record format 2) on `store` with `extra` flags.
    pub async fn start_previous(store: &str, extra: &[&str]) -> Self {
        Self::launch(Launch::on_loopback(
            store,
            extra,
            None,
            Some(previous_broker_binary()),
        ))
        .await
    }

    /// Starts `leasehold serve` inside `ns` on `store` with `extra` flags,
    /// and waits until it accepts calls. It listens (gRPC and metrics) on
    /// [`NetNs::ns_ip`], where this namespace's clients reach it, and
    /// reaches only what listens on [`NetNs::host_ip`]: give it a store
    /// there (e.g. [`RedisServer::start_bound`] and
    /// [`RedisServer::url_at`]). Restart, kill and pid work as for any
    /// broker process (`ip netns exec` execs it: the child is the broker).
    pub async fn start_in(ns: &NetNs, store: &str, extra: &[&str]) -> Self {
        // Every port is free in a namespace of our own; a free loopback
        // port of this one is as good as any.
        Self::launch(Launch {
            addr: SocketAddr::new(ns.ns_ip().into(), free_port()),
            metrics_addr: SocketAddr::new(ns.ns_ip().into(), free_port()),
            store: store.to_owned(),
            extra: extra.iter().map(ToString::to_string).collect(),
            netns: Some(ns.name().to_owned()),
            log: None,
            binary: None,
        })
        .await
    }

    async fn launch(launch: Launch) -> Self {
        let broker = BrokerProcess {
            addr: launch.addr,
            metrics_addr: launch.metrics_addr,
            child: Self::spawn(&launch),
            launch,
        };
        broker.wait_up().await;
        broker
    }

    /// Waits until it accepts calls: a plaintext connection succeeds or,
    /// with TLS on, its port accepts TCP connections.
    async fn wait_up(&self) {
        if !self.launch.extra.iter().any(|f| f == "--tls-cert") {
            self.client().await;
            return;
        }
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("leasehold serve never came up at {}", self.addr);
    }

    /// Its process id (to read its memory from /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory, in bytes (VmRSS).
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status");
        kb * 1024
    }

    /// Sends it SIGHUP (reload the TLS files).
    pub fn hang_up(&self) {
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(as_pid(self.child.id()), libc::SIGHUP) };
        assert_eq!(sent, 0, "SIGHUP not sent");
    }

    fn spawn(launch: &Launch) -> Child {
        let binary = launch.binary.clone().unwrap_or_else(leasehold_binary);
        let mut command = match &launch.netns {
            Some(name) => netns::exec_in(name, binary),
            None => Command::new(binary),
        };
        command
            .args([
                "serve",
                "--listen",
                &launch.addr.to_string(),
                "--metrics-listen",
                &launch.metrics_addr.to_string(),
            ])
            .args(["--store", &launch.store, "--key-prefix", "test:"])
            .args(&launch.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(path) = &launch.log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the broker log");
            command.stderr(Stdio::from(file)).env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "debug".into()),
            );
        }
        command.spawn().expect("spawn leasehold serve")
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL, then a new process on the same address.
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Self::spawn(&self.launch);
        self.wait_up().await;
    }

    /// A client of it (retrying the connect for up to 10 s while it starts).
    pub async fn client(&self) -> LeaseholdServiceClient<Channel> {
        let endpoint = Channel::from_shared(format!("http://{}", self.addr)).expect("valid URL");
        for _ in 0..100 {
            if let Ok(channel) = endpoint.connect().await {
                return LeaseholdServiceClient::new(channel);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("leasehold serve never came up at {}", self.addr);
    }

    /// SIGKILL: the broker dies without a word.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An Acquire request.
pub fn acquire_req(name: &str, ttl_ms: u64, holder: &str, wait_timeout_ms: u64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        ttl_ms,
        holder: holder.into(),
        wait_timeout_ms,
        lock_delay_ms: 0,
        limit: 0,
        ..Default::default()
    }
}

/// Acquires `name` once, expecting a grant.
pub async fn must_acquire(
    client: &mut LeaseholdServiceClient<Channel>,
    name: &str,
    ttl_ms: u64,
) -> Lease {
    client
        .acquire(acquire_req(name, ttl_ms, "test", 0))
        .await
        .unwrap_or_else(|s| panic!("acquire {name}: {s:?}"))
        .into_inner()
        .lease
        .expect("a lease")
}

/// Fetches `/metrics` from a broker with a plain HTTP/1.1 request.
pub async fn scrape(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of an unlabelled (or fully labelled) sample in a scrape.
pub fn sample(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no sample {series} in\n{scrape}"))
}

/// Waits until `condition` holds, checking every 10 ms, for at most
/// `limit`: for state owned by another process or task that offers no event
/// to await (a waiter registered on a broker, a health status).
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Local waiters on `name` as the broker reports them.
pub async fn local_waiters(client: &mut LeaseholdServiceClient<Channel>, name: &str) -> u32 {
    client
        .describe(leasehold_server::proto::DescribeRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner()
        .local_waiters
}

/// The server behind a store of [`brokers_on_each_store`], kept alive for
/// as long as the test holds it.
pub enum StoreServer {
    /// A redis-server.
    Redis(RedisServer),
    /// A PostgreSQL server.
    Postgres(PostgresServer),
}

/// One broker on each kind of store: `memory`, Redis and PostgreSQL (the
/// servers are returned so that they live as long as the test).
pub async fn brokers_on_each_store() -> Vec<(&'static str, Broker, Option<StoreServer>)> {
    let redis = RedisServer::start();
    let on_redis = Broker::start(&redis.url()).await;
    let postgres = PostgresServer::start();
    let on_postgres = Broker::start(&postgres.url()).await;
    vec![
        ("memory", Broker::start("memory").await, None),
        ("redis", on_redis, Some(StoreServer::Redis(redis))),
        (
            "postgres",
            on_postgres,
            Some(StoreServer::Postgres(postgres)),
        ),
    ]
}

/// Follows a broker's health stream (a `grpc.health.v1` Watch) until it
/// reports `want`, for at most 15 s: health changes at a store ping, an
/// event the stream delivers.
pub async fn await_health(
    stream: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
    want: tonic_health::pb::health_check_response::ServingStatus,
) {
    use tokio_stream::StreamExt;
    let wait = async {
        while let Some(update) = stream.next().await {
            if update.expect("health update").status() == want {
                return;
            }
        }
        panic!("health stream ended before {want:?}");
    };
    tokio::time::timeout(Duration::from_secs(15), wait)
        .await
        .unwrap_or_else(|_| panic!("health never became {want:?}"));
}

#[cfg(test)]
mod free_port_tests {
    /// The kernel's `bind(:0)` picks among the ephemeral ports at random, so
    /// 500 draws without the registry repeat a port almost surely (a
    /// birthday bound over ~14,000 even ports).
    #[test]
    fn no_port_is_handed_out_twice() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let port = super::free_port();
            assert!(seen.insert(port), "port {port} handed out twice");
        }
    }
}
