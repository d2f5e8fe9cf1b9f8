//! A real etcd for the etcd store's tests and for the tests that compare
//! the broker with it (the load generator's `--etcd`): Debian's
//! etcd-server (`etcd` on the PATH, or `$LEASEHOLD_ETCD`), one member
//! ([`EtcdServer`]) or a cluster of three ([`EtcdCluster`]) listening on
//! free loopback ports (client and peer), their data in temporary folders
//! removed on drop; and the calls of etcd's API the tests make
//! themselves: [`status`] (which member leads, the current revision),
//! [`compact`] and [`move_leader`].
//!
//! A cluster may also have one member in a network namespace of its own
//! ([`EtcdCluster::start_with_one_in`]), which [`NetNs::isolate`] cuts off
//! from the other two and from every client, the way a partition does.
//!
//! One member's heartbeat and election timeout are a tenth of etcd's
//! defaults (10 ms, 100 ms): the shortest lease etcd grants is
//! `ceil(1.5 x election timeout)` rounded up to a whole second, 1 s here
//! instead of 2 s, so that the conformance suite's short leases stay
//! short. One member never holds an election after its first. A cluster's
//! members run at half etcd's defaults (50 ms, 500 ms; the shortest lease
//! is 1 s all the same), so that a loaded machine's scheduling delays (a
//! member's heartbeat late by tens of ms) stay far below the election
//! timeout: no election but those a test causes.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{as_pid, free_port, netns::NetNs};

/// The etcd binary: `$LEASEHOLD_ETCD`, or `etcd` on the PATH.
fn etcd_binary() -> String {
    std::env::var("LEASEHOLD_ETCD").unwrap_or_else(|_| "etcd".into())
}

/// How one member is run: what a restart needs to run it again.
struct Member {
    name: String,
    /// Where its client port listens.
    client_ip: IpAddr,
    port: u16,
    /// Where its peer port listens.
    peer_ip: IpAddr,
    peer: u16,
    /// The network namespace it runs in (`ip netns exec`); `None`: the
    /// root one.
    netns: Option<String>,
    dir: PathBuf,
    /// `--initial-cluster`: every member's `name=peer URL`.
    cluster: String,
    /// `--initial-cluster-token`: tells this cluster from another test's.
    token: String,
    /// `--heartbeat-interval` and `--election-timeout`, in ms.
    timing: (u32, u32),
}

impl Member {
    /// One on loopback, in the root namespace, not in a cluster yet.
    fn on_loopback(name: String, port: u16, peer: u16, timing: (u32, u32)) -> Member {
        Member {
            name,
            client_ip: Ipv4Addr::LOCALHOST.into(),
            port,
            peer_ip: Ipv4Addr::LOCALHOST.into(),
            peer,
            netns: None,
            dir: data_dir(port),
            cluster: String::new(),
            token: String::new(),
            timing,
        }
    }

    fn client_url(&self) -> String {
        format!("http://{}:{}", self.client_ip, self.port)
    }

    fn peer_url(&self) -> String {
        format!("http://{}:{}", self.peer_ip, self.peer)
    }

    /// Runs it and waits for the line saying it serves clients (logged
    /// once its gRPC server runs, after "ready to serve client requests",
    /// which a member of a cluster reaches once it joined a quorum);
    /// `None` if it exited first (a port was taken) or did not get there
    /// in 30 s.
    fn spawn(&self) -> Option<Child> {
        let client_url = self.client_url();
        let peer_url = self.peer_url();
        let mut command = match &self.netns {
            Some(ns) => crate::netns::exec_in(ns, etcd_binary()),
            None => Command::new(etcd_binary()),
        };
        let mut child = command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &self.cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", &self.timing.0.to_string()])
            .args(["--election-timeout", &self.timing.1.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run '{}' ({e}): install Debian's etcd-server or set LEASEHOLD_ETCD",
                    etcd_binary()
                )
            });
        let stderr = child.stderr.take().expect("piped stderr");
        crate::ready_when(
            child,
            stderr,
            "serving insecure client requests",
            Duration::from_secs(30),
        )
    }

    /// [`Member::spawn`] on its own ports again, a few tries while the
    /// kernel lets the ports of the process just killed go.
    fn respawn(&self) -> Child {
        for _ in 0..20 {
            if let Some(child) = self.spawn() {
                return child;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "etcd member {} did not start again on ports {} and {}",
            self.name, self.port, self.peer
        );
    }
}

/// A new data folder's path, named after this process and `port`.
fn data_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("leasehold-etcd-{}-{port}", std::process::id()))
}

/// SIGKILL, and the exit reaped.
fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` (SIGSTOP, SIGCONT) to `child`, a child not reaped yet:
/// every child is reaped only by [`kill`], which takes it from its owner.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of our own child, not reaped (see above),
    // so the pid is still its own and no other process's.
    let sent = unsafe { libc::kill(as_pid(child.id()), signal) };
    assert_eq!(
        sent,
        0,
        "signal {signal} to etcd (pid {}) not sent",
        child.id()
    );
    if signal == libc::SIGSTOP {
        stopped(child.id());
    }
}

/// Waits until every thread of process `pid` is stopped: kill(2) returns
/// before they are, and a thread already running on the other core may
/// still answer a request sent right after it (a test saw a watch
/// confirmed by an etcd it had just stopped).
fn stopped(pid: u32) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
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
            std::time::Instant::now() < deadline,
            "etcd (pid {pid}) not stopped 10 s after SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A one-member etcd, killed on drop.
pub struct EtcdServer {
    member: Member,
    /// `None` while it is stopped ([`EtcdServer::stop`]).
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it serves clients.
    pub fn start() -> Self {
        for _ in 0..5 {
            let (port, peer) = (free_port(), free_port());
            let member = Member {
                cluster: format!("leasehold-test=http://127.0.0.1:{peer}"),
                token: "etcd-cluster".into(),
                ..Member::on_loopback("leasehold-test".into(), port, peer, (10, 100))
            };
            if let Some(child) = member.spawn() {
                return EtcdServer {
                    member,
                    child: Some(child),
                };
            }
            let _ = std::fs::remove_dir_all(&member.dir);
        }
        panic!("etcd did not start on any of 5 pairs of free ports");
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.member.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.member.port)
    }

    /// `etcd://127.0.0.1:PORT`: the broker's `--store`.
    pub fn store_url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.member.port)
    }

    /// Its process id (it runs: not [`EtcdServer::stop`]ped).
    pub fn pid(&self) -> u32 {
        self.running().id()
    }

    fn running(&self) -> &Child {
        self.child
            .as_ref()
            .expect("etcd is stopped: restart it first")
    }

    /// Kills it (SIGKILL) and starts it again on the same ports with its
    /// data: what it had written to its log survives. After
    /// [`EtcdServer::stop`], starts it again.
    pub fn restart(&mut self) {
        self.stop();
        self.child = Some(self.member.respawn());
    }

    /// Kills it and starts it again on the same ports with no data: a new
    /// cluster, its revisions from 1 again.
    pub fn wipe(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.member.dir);
        self.child = Some(self.member.respawn());
    }

    /// Kills it (SIGKILL), its data kept, and leaves it down: its port
    /// refuses connections until [`EtcdServer::restart`].
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            kill(child);
        }
    }

    /// Freezes it (SIGSTOP): its port still accepts connections, and the
    /// ones open stay open, but nothing is answered until
    /// [`EtcdServer::resume`].
    pub fn pause(&self) {
        signal(self.running(), libc::SIGSTOP);
    }

    /// Lets a paused etcd run again (SIGCONT).
    pub fn resume(&self) {
        signal(self.running(), libc::SIGCONT);
    }

    /// Compacts its history at its current revision ([`compact`]): the
    /// revision compacted.
    pub async fn compact(&self) -> i64 {
        compact(&self.url())
            .await
            .unwrap_or_else(|e| panic!("compact etcd at {}: {e:?}", self.url()))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.member.dir);
    }
}

/// An etcd cluster of [`EtcdCluster::SIZE`] members on loopback ports
/// (or one of them in a network namespace:
/// [`EtcdCluster::start_with_one_in`]), every member killed on drop.
/// Members are named by their index, 0 to `SIZE - 1`; any of them can be
/// killed, restarted with its data, paused (SIGSTOP) and resumed.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// `None` while the member is killed.
    children: Vec<Option<Child>>,
    paused: Vec<bool>,
}

impl EtcdCluster {
    /// How many members.
    pub const SIZE: usize = 3;

    /// Starts the members at once (each waits for a quorum before it
    /// serves clients) and returns when every one serves clients.
    pub fn start() -> Self {
        Self::start_placed(None)
    }

    /// [`EtcdCluster::start`], with member 0 in `ns`: its client and peer
    /// ports on the namespace's end of the pair ([`NetNs::ns_ip`]), while
    /// members 1 and 2 run in the root namespace, their client ports on
    /// loopback and their peer ports on the root's end of the pair
    /// ([`NetNs::host_ip`]), where member 0 reaches them. Every packet
    /// stays on this machine. [`NetNs::isolate`] then cuts member 0 off
    /// from its peers and from every client. Drop the cluster before `ns`.
    pub fn start_with_one_in(ns: &NetNs) -> Self {
        Self::start_placed(Some(ns))
    }

    fn start_placed(ns: Option<&NetNs>) -> Self {
        for _ in 0..5 {
            let ports: Vec<(u16, u16)> = (0..Self::SIZE)
                .map(|_| (free_port(), free_port()))
                .collect();
            let token = format!("leasehold-test-{}-{}", std::process::id(), ports[0].0);
            let mut members: Vec<Member> = ports
                .iter()
                .enumerate()
                .map(|(i, &(port, peer))| {
                    let member = Member {
                        token: token.clone(),
                        ..Member::on_loopback(format!("m{i}"), port, peer, (50, 500))
                    };
                    match (ns, i) {
                        (None, _) => member,
                        (Some(ns), 0) => Member {
                            client_ip: ns.ns_ip().into(),
                            peer_ip: ns.ns_ip().into(),
                            netns: Some(ns.name().to_owned()),
                            ..member
                        },
                        (Some(ns), _) => Member {
                            peer_ip: ns.host_ip().into(),
                            ..member
                        },
                    }
                })
                .collect();
            let cluster = members
                .iter()
                .map(|m| format!("{}={}", m.name, m.peer_url()))
                .collect::<Vec<_>>()
                .join(",");
            for member in &mut members {
                member.cluster.clone_from(&cluster);
            }
            let children: Vec<Option<Child>> = std::thread::scope(|scope| {
                let spawning: Vec<_> = members
                    .iter()
                    .map(|member| scope.spawn(|| member.spawn()))
                    .collect();
                spawning
                    .into_iter()
                    .map(|s| s.join().expect("a thread starting an etcd member"))
                    .collect()
            });
            let all_up = children.iter().all(Option::is_some);
            let cluster = EtcdCluster {
                paused: vec![false; members.len()],
                members,
                children,
            };
            if all_up {
                return cluster;
            }
            // A port was taken: drop (kill and clean up), then new ports.
        }
        panic!("an etcd cluster did not start on any of 5 sets of free ports");
    }

    /// `etcd://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2`: the broker's
    /// `--store`, every member listed, member 0 first (its address the
    /// namespace's, if it runs in one).
    pub fn store_url(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}:{}", m.client_ip, m.port))
            .collect();
        format!("etcd://{}", members.join(","))
    }

    /// `etcd://127.0.0.1:PORT`: a `--store` listing member `i` alone.
    pub fn member_store_url(&self, i: usize) -> String {
        let member = &self.members[i];
        format!("etcd://{}:{}", member.client_ip, member.port)
    }

    /// Member `i`'s client URL, `http://127.0.0.1:PORT` (its address the
    /// namespace's, if it runs in one).
    pub fn url(&self, i: usize) -> String {
        self.members[i].client_url()
    }

    /// Member `i`'s process id; `None` while it is killed.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children[i].as_ref().map(Child::id)
    }

    /// Whether member `i` runs and is not paused: it can answer.
    pub fn is_up(&self, i: usize) -> bool {
        self.children[i].is_some() && !self.paused[i]
    }

    /// Kills member `i` (SIGKILL), its data kept; it stays down until
    /// [`EtcdCluster::restart`].
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.children[i].take() {
            kill(child);
        }
        self.paused[i] = false;
    }

    /// Kills member `i` if it runs and starts it again with its data, on
    /// its ports; returns once it serves clients (it rejoined a quorum).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.children[i] = Some(self.members[i].respawn());
    }

    /// Freezes member `i` (SIGSTOP): its ports accept connections and
    /// the open ones stay open, but it answers nothing, neither clients
    /// nor its peers, until [`EtcdCluster::resume`].
    pub fn pause(&mut self, i: usize) {
        let child = self.children[i].as_ref().expect("pause a running member");
        signal(child, libc::SIGSTOP);
        self.paused[i] = true;
    }

    /// Lets a paused member run again (SIGCONT).
    pub fn resume(&mut self, i: usize) {
        let child = self.children[i].as_ref().expect("resume a running member");
        signal(child, libc::SIGCONT);
        self.paused[i] = false;
    }

    /// The member that leads now, as the members up say: one whose
    /// Maintenance.Status names itself as the leader. `None` while no
    /// member up says so (an election in progress, no quorum).
    pub async fn leader(&self) -> Option<usize> {
        self.leader_among(0..self.members.len()).await
    }

    /// [`EtcdCluster::leader`], asking only `members` (those of them up):
    /// the side of a partition the tests can reach quickly.
    pub async fn leader_among(&self, members: impl IntoIterator<Item = usize>) -> Option<usize> {
        for i in members.into_iter().filter(|&i| self.is_up(i)) {
            if status(&self.url(i)).await.is_ok_and(|s| s.leads()) {
                return Some(i);
            }
        }
        None
    }

    /// Waits until a member up leads ([`EtcdCluster::leader`]), for at
    /// most `limit`: its index.
    pub async fn await_leader(&self, limit: Duration) -> usize {
        self.await_leader_among(0..self.members.len(), limit).await
    }

    /// Waits until one of `members` leads ([`EtcdCluster::leader_among`]),
    /// for at most `limit`: its index.
    pub async fn await_leader_among(
        &self,
        members: impl IntoIterator<Item = usize> + Clone,
        limit: Duration,
    ) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(leader) = self.leader_among(members.clone()).await {
                return leader;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no etcd member up of those asked led within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Makes member `i` the leader, for at most `limit`: the leader is
    /// asked to hand its leadership over ([`move_leader`], as `etcdctl
    /// move-leader`), until member `i` says it leads.
    pub async fn make_leader(&self, i: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        let target = status(&self.url(i))
            .await
            .unwrap_or_else(|e| panic!("etcd member {i}'s status: {e:?}"))
            .member_id;
        loop {
            let leader = self.await_leader(limit).await;
            if leader == i {
                return;
            }
            // Refused when the leader changed meanwhile: asked again.
            let moved = move_leader(&self.url(leader), target).await;
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd member {i} did not lead within {limit:?} (member {leader} does; the last \
                 MoveLeader: {moved:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for child in self.children.drain(..).flatten() {
            kill(child);
        }
        for member in &self.members {
            let _ = std::fs::remove_dir_all(&member.dir);
        }
    }
}

/// What one member's Maintenance.Status says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// etcd's version (`3.4.23`).
    pub version: String,
    /// The member's own id.
    pub member_id: u64,
    /// The id of the member it takes for the leader (0: none).
    pub leader: u64,
    /// The revision of its key-value store (the last write it applied).
    pub revision: i64,
    /// Its Raft term.
    pub raft_term: u64,
}

impl Status {
    /// Whether the member takes itself for the leader.
    pub fn leads(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// Maintenance.Status of the etcd member at `url` (`http://host:port`),
/// within 2 s.
pub async fn status(url: &str) -> Result<Status, tonic::Status> {
    let answer: wire::StatusResponse = unary(
        url,
        "/etcdserverpb.Maintenance/Status",
        wire::StatusRequest {},
    )
    .await?;
    let header = answer.header.unwrap_or_default();
    Ok(Status {
        version: answer.version,
        member_id: header.member_id,
        leader: answer.leader,
        revision: header.revision,
        raft_term: header.raft_term,
    })
}

/// Compacts the history of the etcd cluster at `url` at its current
/// revision (as `etcdctl compact $(current revision)`, waiting for the
/// compaction to be applied: `physical`): the revision compacted (or
/// compacted already, when nothing was written since the last
/// compaction). A watcher that starts at or below it is cancelled by etcd
/// from now on.
pub async fn compact(url: &str) -> Result<i64, tonic::Status> {
    let revision = status(url).await?.revision;
    let compacted: Result<wire::CompactionResponse, _> = unary(
        url,
        "/etcdserverpb.KV/Compact",
        wire::CompactionRequest {
            revision,
            physical: true,
        },
    )
    .await;
    match compacted {
        Ok(_) => Ok(revision),
        // Compacted there already (no write since the last compaction).
        Err(status)
            if status.code() == tonic::Code::OutOfRange
                && status.message().contains("has been compacted") =>
        {
            Ok(revision)
        }
        Err(status) => Err(status),
    }
}

/// Asks the etcd leader at `url` to hand its leadership over to the member
/// whose id is `target` (Maintenance.MoveLeader, as `etcdctl
/// move-leader`); etcd answers once the target leads. Refused by a member
/// that does not lead.
pub async fn move_leader(url: &str, target: u64) -> Result<(), tonic::Status> {
    let _: wire::MoveLeaderResponse = unary(
        url,
        "/etcdserverpb.Maintenance/MoveLeader",
        wire::MoveLeaderRequest { target_id: target },
    )
    .await?;
    Ok(())
}

/// One unary call of etcd's API on a connection of its own, bounded by
/// 2 s (a paused member answers nothing).
async fn unary<Req, Resp>(
    url: &str,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let limit = Duration::from_secs(2);
    let call = async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .map_err(|e| tonic::Status::invalid_argument(format!("{url}: {e}")))?
            .connect_timeout(limit)
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("connect to {url}: {e}")))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("{url}: {e}")))?;
        grpc.unary(
            tonic::Request::new(request),
            http::uri::PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::<Req, Resp>::default(),
        )
        .await
        .map(tonic::Response::into_inner)
    };
    tokio::time::timeout(limit, call).await.map_err(|_| {
        tonic::Status::deadline_exceeded(format!("{path} at {url}: no answer in {limit:?}"))
    })?
}

/// The few messages of etcd 3.4's v3 API the harness sends and reads,
/// with their fields' numbers as in `server/proto/etcd/etcdserver/
/// etcdserverpb/rpc.proto` (fields left out are skipped on decoding).
/// Declared here rather than compiled from the proto: the harness needs
/// three calls, not the whole API.
mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResponseHeader {
        #[prost(uint64, tag = "2")]
        pub member_id: u64,
        #[prost(int64, tag = "3")]
        pub revision: i64,
        #[prost(uint64, tag = "4")]
        pub raft_term: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StatusRequest {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StatusResponse {
        #[prost(message, optional, tag = "1")]
        pub header: Option<ResponseHeader>,
        #[prost(string, tag = "2")]
        pub version: String,
        #[prost(uint64, tag = "4")]
        pub leader: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CompactionRequest {
        #[prost(int64, tag = "1")]
        pub revision: i64,
        #[prost(bool, tag = "2")]
        pub physical: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CompactionResponse {
        #[prost(message, optional, tag = "1")]
        pub header: Option<ResponseHeader>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MoveLeaderRequest {
        #[prost(uint64, tag = "1")]
        pub target_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MoveLeaderResponse {
        #[prost(message, optional, tag = "1")]
        pub header: Option<ResponseHeader>,
    }
}
