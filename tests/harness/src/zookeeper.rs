//! A real ZooKeeper for the tests: Debian's `zookeeper` package (3.8.0,
//! `libzookeeper-java`'s jars; `scripts/test` installs it with
//! `default-jre-headless`), one standalone server ([`ZooKeeperServer`]) or
//! an ensemble ([`ZooKeeperEnsemble`], three members on loopback) on free
//! loopback ports, each in a temporary folder of its own removed on drop
//! (kept, and named on stderr, when the test is panicking).
//!
//! No `zkServer.sh`: the JVM runs `QuorumPeerMain` directly, with
//! `/usr/share/java/zookeeper.jar` on the class path (its manifest's
//! `Class-Path` names the other jars it needs; `$LEASEHOLD_ZOOKEEPER_CLASSPATH`
//! replaces it, `$LEASEHOLD_JAVA` the `java` binary) and Debian's
//! `slf4j-simple.jar`: without an SLF4J binding the server logs nothing.
//! Its log (stdout and stderr, INFO) goes to `zookeeper.log` in its folder,
//! kept across restarts; every panic here names it and quotes its end.
//! Every jar of that `Class-Path` is installed but `jline.jar`, which only
//! the command-line client needs.
//!
//! The settings: `tickTime=200` (sessions of 400 ms to 10 s, elections in
//! a few ticks), `initLimit=25` and `syncLimit=10` (5 s and 2 s, so that a
//! follower slowed down by a loaded machine is not dropped), the admin
//! server off, the four-letter words `srvr,stat,ruok,mntr,conf` allowed,
//! TTL nodes on (`zookeeper.extendedTypesEnabled`) and containers and TTL
//! nodes reaped every second (`znode.container.checkIntervalMs=1000`), a
//! small heap (`-Xmx128m`), the serial collector and the C1 compiler only
//! (a faster start), and no `hsperfdata` file (a SIGKILLed JVM leaves it in
//! `/tmp`).
//!
//! A standalone server takes a snapshot as it starts (`snapshot.0`), so
//! ZOOKEEPER-3056 (3.8 refuses to start from transaction logs without a
//! snapshot, Debian's NEWS warns) does not trip a restart right after the
//! first writes; nor did it an ensemble member's restart in
//! `tests/zookeeper.rs`: `zookeeper.snapshot.trust.empty` is left off.
//!
//! Readiness is polled, not slept for: a server is up once `srvr` on its
//! client port answers with a `Mode:` line (it says "not currently serving
//! requests" until then; an ensemble member until it has joined a quorum),
//! and its TLS port, if it has one, accepts connections (bound a second or
//! so after the plain one serves, on a loaded machine).
//!
//! A server can also run under libfaketime
//! ([`ZooKeeperServer::start_faketime`]: its wall clock, the store's, is
//! stepped while its monotonic clock goes on) or with a TLS port
//! ([`ZooKeeperServer::start_tls`]: Netty's connection factory, PEM key and
//! trust stores, client certificates required or not).
//!
//! Measured 2026-12-05 on this project's 2-core machine (lscpu: "Intel(R)
//! Xeon(R) Processor", 24 GB; OpenJDK 17.0.15), not idle (a load average
//! of 1.9 from other work), 3 runs each, min / median / max (the ignored
//! test `start_times_and_memory` in `tests/zookeeper.rs` measures them
//! again):
//!
//! - a standalone server, from spawn to `Mode: standalone`: 0.29 / 0.29 /
//!   0.30 s; resident 54 / 55 / 55 MB;
//! - an ensemble of three, from spawning the three to one leader and two
//!   followers: 1.03 / 1.08 / 1.10 s; resident, the three JVMs together,
//!   172 / 172 / 173 MB (about 57 MB each; the same 3 s later).
//!
//! An ensemble whose leader is killed had elected another within 0.4 s in
//! `tests/zookeeper.rs`.
//!
//! Any server or member can be frozen (`pause`: SIGSTOP of its JVM) and
//! let run again (`resume`), and an ensemble can have its member 0 in a
//! network namespace of its own ([`ZooKeeperEnsemble::start_with_one_in`])
//! for a partition, as `etcd.rs` does for etcd.
//!
//! Beside the servers, [`four_letter_word`] and [`srvr`] ask a server how
//! it is, and [`create_node`] writes one znode over ZooKeeper's own
//! protocol (a session opened, one create, the session closed), so that the
//! harness's tests can see data survive a restart before the store has a
//! client.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{as_pid, free_port, netns::NetNs};

/// How long a server may take to serve after its JVM is spawned (a JVM
/// start on a loaded 2-core machine, an ensemble's first election).
const START_LIMIT: Duration = Duration::from_secs(30);

/// How often readiness and roles are polled.
const POLL: Duration = Duration::from_millis(25);

/// The `java` binary: `$LEASEHOLD_JAVA`, or `java` on the PATH.
fn java_binary() -> String {
    std::env::var("LEASEHOLD_JAVA").unwrap_or_else(|_| "java".into())
}

/// The JVM's class path: `$LEASEHOLD_ZOOKEEPER_CLASSPATH`, or Debian's
/// ZooKeeper jar (its manifest lists its dependencies), SLF4J's simple
/// binding (the log) and two Netty jars for TLS.
fn class_path() -> String {
    if let Ok(path) = std::env::var("LEASEHOLD_ZOOKEEPER_CLASSPATH") {
        return path;
    }
    let jar = "/usr/share/java/zookeeper.jar";
    assert!(
        Path::new(jar).exists(),
        "{jar} not found: install Debian's zookeeper package (scripts/test does) or set \
         LEASEHOLD_ZOOKEEPER_CLASSPATH"
    );
    // Netty's codec and resolver: the TLS port's connection factory needs
    // them, and the manifest leaves them out (Debian's libnetty-java, a
    // dependency of the package, has them).
    format!(
        "{jar}:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar:\
         /usr/share/java/netty-resolver.jar"
    )
}

/// A member's role, as `srvr` says it (`Mode: ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A server on its own.
    Standalone,
    /// The ensemble's leader.
    Leader,
    /// A follower of the leader.
    Follower,
    /// Anything else (`observer`, `read-only`).
    Other(String),
}

/// What `srvr` says of a server that serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srvr {
    /// Its role.
    pub mode: Mode,
    /// The last transaction it applied (`Zxid: 0x...`): the epoch in the
    /// high 32 bits, a counter in the low ones; 0 on a fresh standalone
    /// server.
    pub zxid: u64,
    /// How many znodes its tree holds (`Node count:`; on a fresh server,
    /// ZooKeeper's own: `/`, `/zookeeper` and the latter's children).
    pub node_count: u64,
    /// `Zookeeper version: ...`.
    pub version: String,
}

impl Srvr {
    /// Parses `srvr`'s answer; `None` for one without a `Mode:` line (the
    /// server does not serve yet).
    pub fn parse(answer: &str) -> Option<Srvr> {
        let field = |name: &str| {
            answer
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
        };
        let mode = match field("Mode:")? {
            "standalone" => Mode::Standalone,
            "leader" => Mode::Leader,
            "follower" => Mode::Follower,
            other => Mode::Other(other.to_owned()),
        };
        let zxid = field("Zxid:")?;
        let zxid = u64::from_str_radix(zxid.trim_start_matches("0x"), 16).ok()?;
        Some(Srvr {
            mode,
            zxid,
            node_count: field("Node count:")?.parse().ok()?,
            version: field("Zookeeper version:").unwrap_or_default().to_owned(),
        })
    }
}

/// Sends the four-letter word `word` (`ruok`, `srvr`, `mntr`...) to the
/// server on loopback `port` and returns its whole answer (the server
/// closes the connection after it). Bounded: 1 s to connect, 2 s to
/// answer.
pub fn four_letter_word(port: u16, word: &str) -> std::io::Result<String> {
    four_letter_word_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), word)
}

/// [`four_letter_word`] to a server at `address` (a member in a network
/// namespace listens on the namespace's address, not on loopback).
pub fn four_letter_word_at(address: SocketAddr, word: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// `srvr` on loopback `port`: `None` if the server does not answer or does
/// not serve (no quorum yet, or down).
pub fn srvr(port: u16) -> Option<Srvr> {
    srvr_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// [`srvr`] of the server at `address`.
pub fn srvr_at(address: SocketAddr) -> Option<Srvr> {
    Srvr::parse(&four_letter_word_at(address, "srvr").ok()?)
}

/// Creates the persistent znode `path` (empty, open to all) on the server
/// at loopback `port` over ZooKeeper's wire protocol: a session opened, one
/// `create`, the session closed, each a transaction. Returns the create's
/// zxid. An error for a server that does not serve, or a path that exists
/// (`NodeExists`, error -110).
pub fn create_node(port: u16, path: &str) -> std::io::Result<u64> {
    use std::io::{Error, ErrorKind};
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // ConnectRequest: protocolVersion, lastZxidSeen, timeOut (ms),
    // sessionId, passwd (16 bytes), readOnly.
    let mut connect = Vec::new();
    connect.extend(0_i32.to_be_bytes());
    connect.extend(0_i64.to_be_bytes());
    connect.extend(4000_i32.to_be_bytes());
    connect.extend(0_i64.to_be_bytes());
    put_buffer(&mut connect, &[0; 16]);
    connect.push(0);
    send_frame(&mut stream, &connect)?;
    let session = read_frame(&mut stream)?;
    if session.len() < 16 || session[8..16] == [0; 8] {
        return Err(Error::new(
            ErrorKind::ConnectionRefused,
            "no session granted",
        ));
    }
    // RequestHeader (xid, type 1: create), then CreateRequest: path, data,
    // ACLs (one: all permissions to world:anyone), flags (0: persistent).
    let mut create = Vec::new();
    create.extend(1_i32.to_be_bytes());
    create.extend(1_i32.to_be_bytes());
    put_buffer(&mut create, path.as_bytes());
    put_buffer(&mut create, b"");
    create.extend(1_i32.to_be_bytes());
    create.extend(31_i32.to_be_bytes());
    put_buffer(&mut create, b"world");
    put_buffer(&mut create, b"anyone");
    create.extend(0_i32.to_be_bytes());
    send_frame(&mut stream, &create)?;
    let (zxid, err) = reply_header(&read_frame(&mut stream)?)?;
    // closeSession (type -11), answered once the session is closed.
    let mut close = Vec::new();
    close.extend(2_i32.to_be_bytes());
    close.extend((-11_i32).to_be_bytes());
    send_frame(&mut stream, &close)?;
    let _ = read_frame(&mut stream);
    if err != 0 {
        return Err(Error::other(format!(
            "create {path}: ZooKeeper error {err}"
        )));
    }
    Ok(zxid)
}

/// A jute buffer or string: its length, then its bytes.
fn put_buffer(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = i32::try_from(bytes.len()).expect("a short buffer");
    out.extend(len.to_be_bytes());
    out.extend(bytes);
}

fn send_frame(stream: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let len = i32::try_from(body.len()).expect("a short request");
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend(body);
    stream.write_all(&frame)
}

fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0; 4];
    stream.read_exact(&mut len)?;
    let len = usize::try_from(i32::from_be_bytes(len))
        .map_err(|_| std::io::Error::other("a negative frame length"))?;
    let mut body = vec![0; len];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// A ReplyHeader's zxid and error code (xid, zxid, err).
fn reply_header(reply: &[u8]) -> std::io::Result<(u64, i32)> {
    if reply.len() < 16 {
        return Err(std::io::Error::other("a short reply"));
    }
    let zxid = u64::from_be_bytes(reply[4..12].try_into().expect("8 bytes"));
    let err = i32::from_be_bytes(reply[12..16].try_into().expect("4 bytes"));
    Ok((zxid, err))
}

/// How one server is run: what a restart needs to run it again.
struct Member {
    /// Its `myid` (1 to 254) in an ensemble; 0 for a standalone server.
    id: usize,
    /// Its client port, on [`Member::client_ip`].
    port: u16,
    /// Where its client port listens: 127.0.0.1, or the namespace's end
    /// of the pair for a member run in one.
    client_ip: Ipv4Addr,
    /// The network namespace it runs in (`ip netns exec`); `None`: the
    /// root one.
    netns: Option<String>,
    /// Its folder: `zoo.cfg`, `zookeeper.log` and `data/`.
    dir: PathBuf,
    /// The ensemble's `server.N=...` lines; empty for a standalone server.
    servers: Vec<String>,
    /// For a server under libfaketime: the file holding its wall clock's
    /// offset ([`crate::faketime_env`]).
    clock: Option<PathBuf>,
    /// For a server that also speaks TLS: its TLS port and files.
    tls: Option<TlsPort>,
}

/// A TLS client port ([`ZooKeeperServer::start_tls`]): Netty's (the
/// default NIO connection factory speaks no TLS), beside the plain port
/// the harness asks `srvr` on.
#[derive(Clone, Debug)]
pub struct TlsPort {
    /// The port (`secureClientPort`), on the member's client address.
    pub port: u16,
    /// The server's key and certificate chain, PEM, in one file (how
    /// ZooKeeper's PEM key store takes them).
    pub key_store: PathBuf,
    /// The CA certificates it trusts clients' certificates from, PEM.
    pub trust_store: PathBuf,
    /// Whether it requires a client certificate (`ssl.clientAuth=need`;
    /// else `none`).
    pub client_auth: bool,
}

/// Why a server did not come to serve.
enum Failed {
    /// Its JVM exited (a port taken, a bad setting): a new try may do.
    Exited(std::process::ExitStatus),
    /// It ran but did not serve within [`START_LIMIT`].
    Late,
}

impl Member {
    fn new(id: usize, port: u16, servers: Vec<String>) -> Member {
        let dir =
            std::env::temp_dir().join(format!("leasehold-zookeeper-{}-{port}", std::process::id()));
        Member {
            id,
            port,
            client_ip: Ipv4Addr::LOCALHOST,
            netns: None,
            dir,
            servers,
            clock: None,
            tls: None,
        }
    }

    /// Where clients reach it.
    fn address(&self) -> SocketAddr {
        SocketAddr::from((self.client_ip, self.port))
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    /// Writes `zoo.cfg` (and `myid` in an ensemble), the data folder made.
    fn configure(&self) {
        std::fs::create_dir_all(self.data())
            .unwrap_or_else(|e| panic!("create {}: {e}", self.data().display()));
        let mut config = format!(
            "tickTime=200\ninitLimit=25\nsyncLimit=10\ndataDir={}\nclientPort={}\n\
             clientPortAddress={}\nmaxSessionTimeout=10000\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr,stat,ruok,mntr,conf\n",
            self.data().display(),
            self.port,
            self.client_ip
        );
        for line in &self.servers {
            config.push_str(line);
            config.push('\n');
        }
        if let Some(tls) = &self.tls {
            config.push_str(&format!(
                "secureClientPort={}\nsecureClientPortAddress={}\n\
                 ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                 ssl.clientAuth={}\n",
                tls.port,
                self.client_ip,
                tls.key_store.display(),
                tls.trust_store.display(),
                if tls.client_auth { "need" } else { "none" }
            ));
        }
        let path = self.dir.join("zoo.cfg");
        std::fs::write(&path, config).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        if self.id > 0 {
            let myid = self.data().join("myid");
            std::fs::write(&myid, format!("{}\n", self.id))
                .unwrap_or_else(|e| panic!("write {}: {e}", myid.display()));
        }
    }

    /// Spawns its JVM (the configuration written), its output appended to
    /// its log; does not wait.
    fn launch(&self) -> Child {
        self.configure();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap_or_else(|e| panic!("open {}: {e}", self.log().display()));
        let err = log.try_clone().expect("a second handle on the log");
        let mut command = match &self.netns {
            Some(ns) => crate::netns::exec_in(ns, java_binary()),
            None => Command::new(java_binary()),
        };
        if let Some(clock) = &self.clock {
            // Without FAKETIME_FORCE_MONOTONIC_FIX=0, libfaketime 0.9.10
            // (Debian 12's) turns the JVM's timed waits on the monotonic
            // clock into busy loops: an idle server took two cores
            // (libfaketime#425), and the model checker's server starved.
            // With it, idle takes nothing, and timed waits (Thread.sleep)
            // last what they should.
            command
                .envs(crate::faketime_env(clock))
                .env("FAKETIME_FORCE_MONOTONIC_FIX", "0");
        }
        if self.tls.is_some() {
            command.arg(
                "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            );
        }
        command
            .args([
                "-Xms16m",
                "-Xmx128m",
                "-Xss512k",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
            ])
            .arg(format!("-Djava.io.tmpdir={}", self.dir.display()))
            .args([
                "-Dzookeeper.extendedTypesEnabled=true",
                "-Dznode.container.checkIntervalMs=1000",
                "-Dznode.container.maxPerMinute=60000",
                "-Dzookeeper.admin.enableServer=false",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                "-cp",
                &class_path(),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            ])
            .arg(self.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run '{}' ({e}): install Debian's default-jre-headless (scripts/test \
                     does) or set LEASEHOLD_JAVA",
                    java_binary()
                )
            })
    }

    /// Waits until `child`, its JVM, serves (`srvr` answers a mode).
    fn await_serving(&self, child: &mut Child, deadline: Instant) -> Result<Srvr, Failed> {
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Failed::Exited(status));
            }
            if let Some(srvr) = srvr_at(self.address()) {
                // The TLS port is bound after the plain one starts serving
                // (a second or so later on a loaded machine).
                if self.tls_port_open() {
                    return Ok(srvr);
                }
            }
            if Instant::now() >= deadline {
                return Err(Failed::Late);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Whether its TLS port, if it has one, accepts connections.
    fn tls_port_open(&self) -> bool {
        self.tls.as_ref().is_none_or(|tls| {
            TcpStream::connect_timeout(&SocketAddr::from((self.client_ip, tls.port)), POLL).is_ok()
        })
    }

    /// Spawns it and waits until it serves.
    fn spawn(&self) -> Result<Child, Failed> {
        let mut child = self.launch();
        match self.await_serving(&mut child, Instant::now() + START_LIMIT) {
            Ok(_) => Ok(child),
            Err(failed) => {
                kill(child);
                Err(failed)
            }
        }
    }

    /// [`Member::spawn`] on its own ports again, a few tries while the
    /// kernel lets the ports of the process just killed go; panics naming
    /// its log if it does not serve.
    fn respawn(&self) -> Child {
        let mut last = None;
        for _ in 0..10 {
            match self.spawn() {
                Ok(child) => return child,
                Err(Failed::Late) => self.fail("did not serve again in 30 s"),
                Err(Failed::Exited(status)) => last = Some(status),
            }
            // A backoff between tries, not a wait for an event.
            std::thread::sleep(Duration::from_millis(250));
        }
        self.fail(&format!(
            "exited at every one of 10 restarts, the last {last:?}"
        ))
    }

    /// Panics: what went wrong, its log's path and end. The folder is
    /// kept for the log.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "ZooKeeper on port {} {what}; its log, {}, ends:\n{}",
            self.port,
            self.log().display(),
            tail(&self.log(), 30)
        )
    }
}

/// The last `n` lines of the file at `path`.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Sends `signal` (SIGSTOP, SIGCONT) to `child`, a child not reaped yet
/// (only [`kill`] and [`terminate`] reap, and they take it from its
/// owner); after SIGSTOP, returns once every thread of it is stopped.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of our own child, not reaped (see above),
    // so the pid is still its own and no other process's.
    let sent = unsafe { libc::kill(as_pid(child.id()), signal) };
    assert_eq!(
        sent,
        0,
        "signal {signal} to ZooKeeper (pid {}) not sent",
        child.id()
    );
    if signal == libc::SIGSTOP {
        stopped(child.id());
    }
}

/// Waits until every thread of process `pid` is stopped: kill(2) returns
/// before they are, and a thread already running on the other core may
/// still answer a request sent right after it (as `etcd.rs` found).
fn stopped(pid: u32) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all = std::fs::read_dir(&tasks).is_ok_and(|threads| {
            threads.flatten().all(|thread| {
                // The state follows the command's closing parenthesis.
                std::fs::read_to_string(thread.path().join("stat")).is_ok_and(|stat| {
                    stat.rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
                })
            })
        });
        if all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ZooKeeper (pid {pid}) not stopped 10 s after SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGKILL, and the exit reaped.
fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGTERM, and the exit reaped: SIGKILL if it has not exited in 10 s.
fn terminate(mut child: Child) {
    // SAFETY: kill(2) on the pid of our own child, not reaped yet (only
    // this function and `kill` reap, and they take it from its owner).
    unsafe { libc::kill(as_pid(child.id()), libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    kill(child);
}

/// Removes `member`'s folder, or, when the thread panics (a test failed),
/// keeps it and says where its log is.
fn clean_up(member: &Member) {
    if std::thread::panicking() {
        eprintln!(
            "ZooKeeper on port {}: its folder is kept, its log is {}",
            member.port,
            member.log().display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&member.dir);
    }
}

/// A standalone ZooKeeper server, killed on drop.
pub struct ZooKeeperServer {
    member: Member,
    /// `None` while it is down ([`ZooKeeperServer::stop`],
    /// [`ZooKeeperServer::kill`]).
    child: Option<Child>,
}

impl ZooKeeperServer {
    /// Starts a standalone server on a free loopback port, in a folder of
    /// its own, and waits until it serves (`srvr` says `Mode: standalone`).
    pub fn start() -> Self {
        Self::start_clocked(false)
    }

    /// [`ZooKeeperServer::start`] with a TLS client port beside the plain
    /// one ([`ZooKeeperServer::tls_port`]): its certificate `server` (cert
    /// PEM, key PEM) for 127.0.0.1, client certificates from `client_ca`
    /// (PEM) required when `client_auth`.
    pub fn start_tls(server: &(String, String), client_ca: &str, client_auth: bool) -> Self {
        Self::start_member(|member| {
            std::fs::create_dir_all(&member.dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", member.dir.display()));
            let key_store = member.dir.join("server.pem");
            std::fs::write(&key_store, format!("{}{}", server.1, server.0))
                .expect("write the key store");
            let trust_store = member.dir.join("ca.pem");
            std::fs::write(&trust_store, client_ca).expect("write the trust store");
            member.tls = Some(TlsPort {
                port: free_port(),
                key_store,
                trust_store,
                client_auth,
            });
        })
    }

    /// The TLS client port of a server from [`ZooKeeperServer::start_tls`].
    pub fn tls_port(&self) -> u16 {
        self.member
            .tls
            .as_ref()
            .expect("tls_port needs ZooKeeperServer::start_tls")
            .port
    }

    /// [`ZooKeeperServer::start`] under libfaketime: its wall clock (the
    /// `mtime` it stamps on writes, the store's clock) can be stepped with
    /// [`ZooKeeperServer::set_clock_offset`], while its monotonic clock
    /// (session expiry, ticks) goes on, as an NTP step leaves it. Starts at
    /// the true time.
    pub fn start_faketime() -> Self {
        Self::start_clocked(true)
    }

    fn start_clocked(faketime: bool) -> Self {
        Self::start_member(|member| {
            if faketime {
                std::fs::create_dir_all(&member.dir)
                    .unwrap_or_else(|e| panic!("create {}: {e}", member.dir.display()));
                let clock = member.dir.join("clock");
                std::fs::write(&clock, "+0\n").expect("write the faketime file");
                member.clock = Some(clock);
            }
        })
    }

    /// Starts a standalone member made ready by `prepare` (its folder not
    /// yet made), on a free port, a few tries while ports are taken.
    fn start_member(prepare: impl Fn(&mut Member)) -> Self {
        let mut last = None;
        for _ in 0..5 {
            let mut member = Member::new(0, free_port(), Vec::new());
            prepare(&mut member);
            match member.spawn() {
                Ok(child) => {
                    return ZooKeeperServer {
                        member,
                        child: Some(child),
                    }
                }
                Err(Failed::Late) => member.fail("did not serve in 30 s"),
                // A port taken: a new one.
                Err(Failed::Exited(status)) => {
                    last = Some(status);
                    eprintln!(
                        "ZooKeeper on port {} exited ({status}); its log ends:\n{}",
                        member.port,
                        tail(&member.log(), 10)
                    );
                    let _ = std::fs::remove_dir_all(&member.dir);
                }
            }
        }
        panic!("ZooKeeper did not start on any of 5 free ports (the last exit: {last:?})");
    }

    /// The port clients connect to, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.member.port
    }

    /// `127.0.0.1:PORT`: a ZooKeeper client's connect string.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.member.port)
    }

    /// `zookeeper://127.0.0.1:PORT`: the broker's `--store`.
    pub fn url(&self) -> String {
        format!("zookeeper://{}", self.connect_string())
    }

    /// Its JVM's process id (it runs).
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("ZooKeeper is down: restart it first")
            .id()
    }

    /// Its log file (the JVM's output, across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.member.log()
    }

    /// What `srvr` says now; panics (naming the log) if it does not serve.
    pub fn srvr(&self) -> Srvr {
        srvr(self.member.port)
            .unwrap_or_else(|| self.member.fail("does not answer srvr with a mode"))
    }

    /// Kills it (SIGKILL), its data kept, and leaves it down: its port
    /// refuses connections until [`ZooKeeperServer::restart`].
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            kill(child);
        }
    }

    /// Stops it (SIGTERM; SIGKILL after 10 s), its data kept, and leaves it
    /// down until [`ZooKeeperServer::restart`].
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
    }

    /// Kills it if it runs (SIGKILL) and starts it again on its port with
    /// its data; returns once it serves.
    pub fn restart(&mut self) {
        self.kill();
        self.child = Some(self.member.respawn());
    }

    /// Kills it, deletes its data and starts it again on its port: a new
    /// server, its zxid from 0 again. Returns once it serves.
    pub fn wipe(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.member.data());
        self.child = Some(self.member.respawn());
    }

    /// Freezes it (SIGSTOP of its JVM; returns once every thread is
    /// stopped): its port accepts connections (the kernel completes the
    /// handshake) and open ones stay open, but it answers nothing until
    /// [`ZooKeeperServer::resume`]. Its clock goes on meanwhile, so the
    /// sessions whose timeout passed expire as soon as it runs again.
    pub fn pause(&self) {
        signal(
            self.child.as_ref().expect("pause a running ZooKeeper"),
            libc::SIGSTOP,
        );
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        signal(
            self.child.as_ref().expect("resume a running ZooKeeper"),
            libc::SIGCONT,
        );
    }

    /// Sets its wall clock to `seconds` from the true time (negative:
    /// behind), at once: libfaketime reads the offset at every clock call.
    /// Only for a server from [`ZooKeeperServer::start_faketime`]; kept
    /// across restarts.
    pub fn set_clock_offset(&self, seconds: i64) {
        let clock = self
            .member
            .clock
            .as_ref()
            .expect("set_clock_offset needs ZooKeeperServer::start_faketime");
        crate::write_clock_offset(clock, seconds);
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        self.kill();
        clean_up(&self.member);
    }
}

/// A ZooKeeper ensemble on loopback, every member killed on drop. Members
/// are named by their index, 0 to `n - 1` (`myid` 1 to `n`); any of them
/// can be killed and restarted with its data.
pub struct ZooKeeperEnsemble {
    members: Vec<Member>,
    /// `None` while the member is killed.
    children: Vec<Option<Child>>,
    /// Whether the member is frozen ([`ZooKeeperEnsemble::pause`]).
    paused: Vec<bool>,
}

impl ZooKeeperEnsemble {
    /// Starts `n` members (2 to 254) at once, each on free loopback ports
    /// (client, quorum, election) in a folder of its own, and returns once
    /// one leads and the others follow.
    pub fn start(n: usize) -> Self {
        Self::start_placed(n, None)
    }

    /// [`ZooKeeperEnsemble::start`] of three members, with member 0 in
    /// `ns`: its client, quorum and election ports on the namespace's end
    /// of the pair ([`NetNs::ns_ip`]), while members 1 and 2 run in the
    /// root namespace, their client ports on loopback and their quorum and
    /// election ports on the root's end of the pair ([`NetNs::host_ip`]),
    /// where member 0 reaches them. [`NetNs::isolate`] then cuts member 0
    /// off from its peers and from every client, the way a partition does.
    /// Drop the ensemble before `ns`.
    ///
    /// Member 0's `myid` is the highest (3; members 1 and 2 have 1 and 2),
    /// so that it wins an election among members of the same zxid:
    /// [`ZooKeeperEnsemble::make_leader`] relies on it.
    pub fn start_with_one_in(ns: &NetNs) -> Self {
        Self::start_placed(3, Some(ns))
    }

    fn start_placed(n: usize, ns: Option<&NetNs>) -> Self {
        assert!(
            (2..255).contains(&n),
            "an ensemble of 2 to 254 members (ids below 255 with TTL nodes on), not {n}"
        );
        for _ in 0..5 {
            let ports: Vec<(u16, u16, u16)> = (0..n)
                .map(|_| (free_port(), free_port(), free_port()))
                .collect();
            // Member i's myid, and the address its peers reach it at.
            let id = |i: usize| match ns {
                None => i + 1,
                Some(_) if i == 0 => n,
                Some(_) => i,
            };
            let peer_ip = |i: usize| match ns {
                None => Ipv4Addr::LOCALHOST,
                Some(ns) if i == 0 => ns.ns_ip(),
                Some(ns) => ns.host_ip(),
            };
            let servers: Vec<String> = ports
                .iter()
                .enumerate()
                .map(|(i, (_, quorum, election))| {
                    format!("server.{}={}:{quorum}:{election}", id(i), peer_ip(i))
                })
                .collect();
            let members: Vec<Member> = ports
                .iter()
                .enumerate()
                .map(|(i, &(port, _, _))| {
                    let member = Member::new(id(i), port, servers.clone());
                    match ns {
                        Some(ns) if i == 0 => Member {
                            client_ip: ns.ns_ip(),
                            netns: Some(ns.name().to_owned()),
                            ..member
                        },
                        _ => member,
                    }
                })
                .collect();
            let children = members.iter().map(|m| Some(m.launch())).collect();
            let mut ensemble = ZooKeeperEnsemble {
                paused: vec![false; members.len()],
                members,
                children,
            };
            if ensemble.await_all_serving() {
                ensemble.leader();
                return ensemble;
            }
            // A port was taken: drop (kill, clean up), then new ports.
        }
        panic!("a ZooKeeper ensemble did not start on any of 5 sets of free ports");
    }

    /// Waits until every member serves: `false` as soon as one's JVM
    /// exited (a port taken: the log's end is printed), a panic naming
    /// the logs if they do not all serve within [`START_LIMIT`].
    fn await_all_serving(&mut self) -> bool {
        let deadline = Instant::now() + START_LIMIT;
        let mut serving = vec![false; self.members.len()];
        loop {
            for (i, member) in self.members.iter().enumerate() {
                let child = self.children[i].as_mut().expect("just spawned");
                if let Ok(Some(status)) = child.try_wait() {
                    eprintln!(
                        "ZooKeeper member {i} exited ({status}); its log ends:\n{}",
                        tail(&member.log(), 10)
                    );
                    return false;
                }
                serving[i] = serving[i] || srvr_at(member.address()).is_some();
            }
            if serving.iter().all(|&s| s) {
                return true;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "not every member served within {START_LIMIT:?} (serving: {serving:?})"
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The members' indices, `0..n`.
    pub fn members(&self) -> std::ops::Range<usize> {
        0..self.members.len()
    }

    /// Member `i`'s client port, on 127.0.0.1 (on the namespace's address
    /// for a member in one: [`ZooKeeperEnsemble::start_with_one_in`]).
    pub fn port(&self, i: usize) -> u16 {
        self.members[i].port
    }

    /// `127.0.0.1:P0,127.0.0.1:P1,...`: every member, member 0 first (its
    /// address the namespace's, if it runs in one).
    pub fn connect_string(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| m.address().to_string())
            .collect();
        members.join(",")
    }

    /// `zookeeper://127.0.0.1:P0,127.0.0.1:P1,...`: the broker's `--store`.
    pub fn url(&self) -> String {
        format!("zookeeper://{}", self.connect_string())
    }

    /// Where member `i`'s clients reach it: 127.0.0.1, or the namespace's
    /// address for a member in one, and its client port.
    pub fn address(&self, i: usize) -> SocketAddr {
        self.members[i].address()
    }

    /// `zookeeper://IP:PORT`: a `--store` listing member `i` alone.
    pub fn member_url(&self, i: usize) -> String {
        format!("zookeeper://{}", self.members[i].address())
    }

    /// Member `i`'s JVM's process id; `None` while it is killed.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children[i].as_ref().map(Child::id)
    }

    /// Whether member `i` runs and is not frozen
    /// ([`ZooKeeperEnsemble::pause`]): it can answer.
    pub fn is_up(&self, i: usize) -> bool {
        self.children[i].is_some() && !self.paused[i]
    }

    /// Member `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.members[i].log()
    }

    /// What `srvr` says of member `i` now: `None` if it is down or does
    /// not serve (no quorum).
    pub fn srvr(&self, i: usize) -> Option<Srvr> {
        srvr_at(self.members[i].address())
    }

    /// Waits (at most 30 s) until exactly one member up says `Mode:
    /// leader` and every other member up says `Mode: follower`, and
    /// returns the leader's index. Panics naming the logs otherwise (fewer
    /// than a quorum up never get there).
    pub fn leader(&self) -> usize {
        let every: Vec<usize> = self.members().collect();
        self.await_leader_among(&every, START_LIMIT)
    }

    /// [`ZooKeeperEnsemble::leader`], asking only `members` (those of them
    /// up) and waiting at most `limit`: the side of a partition the tests
    /// can reach.
    pub fn await_leader_among(&self, members: &[usize], limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let mut modes;
        loop {
            modes = members
                .iter()
                .copied()
                .filter(|&i| self.is_up(i))
                .map(|i| (i, self.srvr(i).map(|s| s.mode)))
                .collect::<Vec<_>>();
            let leaders: Vec<usize> = modes
                .iter()
                .filter(|(_, m)| *m == Some(Mode::Leader))
                .map(|&(i, _)| i)
                .collect();
            let followers = modes
                .iter()
                .filter(|(_, m)| *m == Some(Mode::Follower))
                .count();
            if leaders.len() == 1 && followers + 1 == modes.len() {
                return leaders[0];
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        self.fail(&format!(
            "no single leader with every other member up following within {limit:?} \
             (modes: {modes:?})"
        ))
    }

    /// Makes member `i` the leader: while another leads, that one is
    /// restarted (ZooKeeper has no call to hand leadership over), so the
    /// others elect among themselves, the member of the highest zxid and
    /// then the highest `myid` winning. Member 0 of
    /// [`ZooKeeperEnsemble::start_with_one_in`] has the highest `myid`;
    /// for another member this may not get there, and panics after 5
    /// elections.
    pub fn make_leader(&mut self, i: usize) {
        for _ in 0..5 {
            let leader = self.leader();
            if leader == i {
                return;
            }
            self.restart(leader);
        }
        let leader = self.leader();
        if leader != i {
            self.fail(&format!(
                "member {i} did not lead after 5 elections (member {leader} does)"
            ));
        }
    }

    /// Kills member `i` (SIGKILL), its data kept; it stays down until
    /// [`ZooKeeperEnsemble::restart`].
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.children[i].take() {
            kill(child);
        }
        self.paused[i] = false;
    }

    /// Freezes member `i` (SIGSTOP; returns once every thread of its JVM
    /// is stopped): its ports accept connections and the open ones stay
    /// open, but it answers nothing, neither clients nor its peers, until
    /// [`ZooKeeperEnsemble::resume`].
    pub fn pause(&mut self, i: usize) {
        let child = self.children[i].as_ref().expect("pause a running member");
        signal(child, libc::SIGSTOP);
        self.paused[i] = true;
    }

    /// Lets a frozen member run again (SIGCONT).
    pub fn resume(&mut self, i: usize) {
        let child = self.children[i].as_ref().expect("resume a running member");
        signal(child, libc::SIGCONT);
        self.paused[i] = false;
    }

    /// Kills member `i` if it runs and starts it again with its data on
    /// its ports; returns once it serves (it joined a quorum).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.children[i] = Some(self.members[i].respawn());
    }

    /// Panics: what went wrong, and every member's log's path and end.
    /// The folders are kept for the logs.
    fn fail(&self, what: &str) -> ! {
        let logs: Vec<String> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                format!(
                    "member {i} (port {}), {}, ends:\n{}",
                    m.port,
                    m.log().display(),
                    tail(&m.log(), 15)
                )
            })
            .collect();
        panic!("ZooKeeper ensemble: {what}; logs:\n{}", logs.join("\n"))
    }
}

impl Drop for ZooKeeperEnsemble {
    fn drop(&mut self) {
        for child in self.children.drain(..).flatten() {
            kill(child);
        }
        for member in &self.members {
            clean_up(member);
        }
    }
}
