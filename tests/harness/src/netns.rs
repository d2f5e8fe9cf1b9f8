//! Network partitions for the tests: a network namespace of the test's own
//! ([`NetNs`]), joined to the root namespace by a veth pair on a private
//! /30, in which a broker runs ([`crate::BrokerProcess::start_in`]) while
//! its store and its clients stay in the root namespace. nftables rules
//! inside the namespace then silence the broker's connections to its store
//! ([`NetNs::partition`]) the way a real partition does: packets vanish,
//! nothing is refused or reset, so the broker sees only its store timeout
//! and TCP retransmitting, while clients still reach the broker.
//! [`NetNs::isolate`] cuts every path through the pair instead, those
//! opened from outside too: for a server inside (an etcd member, see
//! `etcd`) that must lose its peers and its clients alike.
//!
//! The proxy (`proxy`) stalls one TCP path between two ends it sits
//! between; this cuts the kernel's own path, so it also covers what the
//! proxy cannot: connections the broker opens afresh during the fault, and
//! TCP's retransmission backoff when the path comes back.
//!
//! Needs root (`ip netns add`), iproute2 and nftables (`scripts/test`
//! installs both); [`NetNs::new`] says when it is not permitted, so that a
//! test can report itself skipped. Everything it creates lives in the
//! namespace or is the veth pair, and is removed on drop.

use std::{
    ffi::OsStr,
    io::Write,
    net::{Ipv4Addr, SocketAddr, TcpStream},
    os::fd::AsRawFd,
    process::{Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

/// The nftables table [`NetNs`] keeps inside its namespace. `output` and
/// `input` hold nothing but a conntrack rule and a jump to `cut_out` and
/// `cut_in`, where [`NetNs::partition`] puts its drops and
/// [`NetNs::heal`] flushes them.
///
/// The conntrack rule (`ct state invalid counter`: counts, drops nothing)
/// is there from the start because it makes the kernel track this
/// namespace's connections from their first packet. A connection first
/// seen mid-stream is picked up with whichever packet comes first taken as
/// its original direction, so a broker's store connection opened before
/// tracking began could look as if the store had opened it, and
/// `ct direction` would then let it through a partition.
const TABLE: &str = "leasehold";
const RULESET: &str = "\
table inet leasehold {
    chain cut_out {
    }
    chain cut_in {
    }
    chain output {
        type filter hook output priority filter; policy accept;
        ct state invalid counter
        jump cut_out
    }
    chain input {
        type filter hook input priority filter; policy accept;
        ct state invalid counter
        jump cut_in
    }
}
";

/// Instances made by this process: part of every name and subnet, so that
/// the tests of one binary, which run in parallel, never share either.
static INSTANCES: AtomicU32 = AtomicU32::new(0);

/// Linux's limit on an interface name (IFNAMSIZ, 16 with the NUL).
const IFNAME_MAX: usize = 15;

/// `ip netns add` refused: not root (nor CAP_SYS_ADMIN). The one condition
/// under which a partition test may skip; its text says why.
#[derive(Debug)]
pub struct NotPermitted(pub String);

impl std::fmt::Display for NotPermitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "network namespaces not permitted here: {}", self.0)
    }
}

/// A network namespace of our own, `lh<pid>_<n>`, with loopback up and a
/// veth pair to the root namespace: [`NetNs::host_ip`] on the root side,
/// [`NetNs::ns_ip`] inside, a /30 of 10.0.0.0/8 no route of the root
/// namespace overlaps. Nothing routes beyond the pair, so a process inside
/// reaches the root namespace's listeners on `host_ip` only (not on
/// 127.0.0.1: loopback inside is the namespace's own).
///
/// Deleted with its veth pair on drop. Drop the processes running inside
/// first (declare the `NetNs` before them): a namespace outlives its name
/// while a process still runs in it.
pub struct NetNs {
    name: String,
    /// The root side of the veth pair; deleting it deletes both ends.
    host_if: String,
    /// The namespace's side of the pair.
    ns_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
}

impl NetNs {
    /// Creates the namespace, the veth pair, the addresses and the
    /// (empty) partition rules. `Err` only if creating a namespace is not
    /// permitted; any other failure (iproute2 or nftables missing, a
    /// command failing) panics, since a root test that silently did not
    /// run would look like a pass.
    pub fn new() -> Result<NetNs, NotPermitted> {
        let pid = std::process::id();
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let name = format!("lh{pid}_{n}");
        let host_if = format!("{name}h");
        let ns_if = format!("{name}n");
        assert!(
            host_if.len() <= IFNAME_MAX,
            "interface name {host_if} too long"
        );
        // A run that crashed (SIGKILL, a panic in a panic) left its
        // namespace and pair behind, and this pid may be that run's again.
        remove(&name, &host_if);

        let added = Command::new("ip")
            .args(["netns", "add", &name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run `ip` ({e}): install iproute2 (scripts/test does)")
            });
        if !added.status.success() {
            let stderr = String::from_utf8_lossy(&added.stderr).trim().to_owned();
            if stderr.contains("not permitted") || stderr.contains("Permission denied") {
                return Err(NotPermitted(format!("`ip netns add {name}`: {stderr}")));
            }
            panic!("`ip netns add {name}` failed: {stderr}");
        }
        // Held until the root side has its routes, so that an instance
        // passed over to the next subnet and the instance whose subnet
        // that is see each other's route: a lock file, since the other
        // instance may be another test process's (`cargo nextest` runs
        // each test in a process of its own).
        let choosing = crate::lock::FileLock::acquire("netns");
        let (host_ip, ns_ip) = subnet(pid, n);
        // From here on, dropping it cleans up whatever was made.
        let ns = NetNs {
            name,
            host_if,
            ns_if,
            host_ip,
            ns_ip,
        };
        let (name, host_if, ns_if) = (&ns.name, &ns.host_if, &ns.ns_if);
        ip(&format!(
            "link add {host_if} type veth peer name {ns_if} netns {name}"
        ));
        ip(&format!("addr add {host_ip}/30 dev {host_if}"));
        // Its routes appear once it is up.
        ip(&format!("link set {host_if} up"));
        drop(choosing);
        ip(&format!("-n {name} addr add {ns_ip}/30 dev {ns_if}"));
        ip(&format!("-n {name} link set {ns_if} up"));
        // A process inside binds and reaches 127.0.0.1 of its own.
        ip(&format!("-n {name} link set lo up"));
        ns.nft_script(RULESET);
        ns.await_link();
        Ok(ns)
    }

    /// Its name (as `ip netns list` shows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The root namespace's end of the pair: where a process inside
    /// reaches a server of the root namespace (which must listen on this
    /// address, or on 0.0.0.0).
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The namespace's end of the pair: where the root namespace reaches a
    /// server inside.
    pub fn ns_ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// `program` to be run inside the namespace: `ip netns exec NAME
    /// program`. `ip` enters the namespace and execs the program in its
    /// own process (no fork), so the child's pid is the program's and
    /// killing the child kills it.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        exec_in(&self.name, program)
    }

    /// Runs `f` on a thread inside the namespace (setns(2) on the
    /// namespace's file, for that thread only). Sockets made there stay in
    /// the namespace wherever they are used afterwards: the way to test
    /// the namespace's path from the test process itself.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: setns(2) on an open namespace file; it moves
                    // this thread alone, which ends with the scope.
                    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                    assert_eq!(
                        entered,
                        0,
                        "setns into {path}: {}",
                        std::io::Error::last_os_error()
                    );
                    f()
                })
                .join()
                .expect("the thread inside the namespace panicked")
        })
    }

    /// A TCP connection to `addr` opened from inside the namespace, or the
    /// error (a timeout while partitioned) after at most `timeout`.
    pub fn connect_from_inside(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> std::io::Result<TcpStream> {
        self.enter(|| TcpStream::connect_timeout(&addr, timeout))
    }

    /// Cuts the namespace off from everything it connects to: every packet
    /// of a connection opened from inside (to the store), established or
    /// new, is dropped both ways, silently. Connections opened from outside
    /// (clients of a broker inside) go on working, so the broker can be
    /// asked while it cannot reach its store. In effect when it returns.
    pub fn partition(&self) {
        self.nft_rule("cut_out", "ct direction original drop");
        self.nft_rule("cut_in", "ct direction reply drop");
        // Packets conntrack cannot place (out of its TCP window, say) carry
        // no direction: dropped too rather than let through.
        for chain in ["cut_out", "cut_in"] {
            self.nft_rule(chain, "ct state invalid drop");
        }
    }

    /// Cuts the namespace off from one TCP peer of the root namespace
    /// only: every packet to `peer` (its address and port) and from it is
    /// dropped, whoever opened the connection; other peers still answer.
    /// In effect when it returns.
    pub fn partition_from(&self, peer: SocketAddr) {
        let SocketAddr::V4(peer) = peer else {
            panic!("partition_from: {peer} is not IPv4 (the pair has IPv4 addresses only)");
        };
        let (ip, port) = (peer.ip(), peer.port());
        self.nft_rule("cut_out", &format!("ip daddr {ip} tcp dport {port} drop"));
        self.nft_rule("cut_in", &format!("ip saddr {ip} tcp sport {port} drop"));
    }

    /// Cuts the namespace off from the root namespace altogether: every
    /// packet through the pair is dropped, both ways, silently, whoever
    /// opened its connection. Unlike [`NetNs::partition`], a server inside
    /// (an etcd member) is cut off from its clients and peers outside too,
    /// the way a machine on the wrong side of a partition is; loopback
    /// inside still works. In effect when it returns.
    pub fn isolate(&self) {
        self.nft_rule("cut_out", &format!("oifname {} drop", self.ns_if));
        self.nft_rule("cut_in", &format!("iifname {} drop", self.ns_if));
    }

    /// Ends every partition ([`NetNs::partition`], [`NetNs::partition_from`],
    /// [`NetNs::isolate`]).
    /// Packets flow again when it returns; connections that were silenced
    /// recover when TCP next retransmits (its backoff grows with the
    /// partition's length: seconds after a partition of seconds).
    pub fn heal(&self) {
        for chain in ["cut_out", "cut_in"] {
            self.nft(&format!("flush chain inet {TABLE} {chain}"));
        }
    }

    /// Waits until the pair carries packets (a veth end is up at once, but
    /// IPv4 on it only after the kernel has set the address up): a
    /// connection from inside to a listener on `host_ip` succeeds.
    fn await_link(&self) {
        let listener = std::net::TcpListener::bind((self.host_ip, 0))
            .unwrap_or_else(|e| panic!("bind {}:0 in the root namespace: {e}", self.host_ip));
        let addr = listener.local_addr().expect("listener address");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match self.connect_from_inside(addr, Duration::from_secs(5)) {
                Ok(_) => return,
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "{}: {addr} unreachable from inside for 20 s: {e}",
                    self.name
                ),
            }
            // Unreachable (no route yet) fails at once: try again shortly.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Appends `rule` to `chain` of [`TABLE`].
    fn nft_rule(&self, chain: &str, rule: &str) {
        self.nft(&format!("add rule inet {TABLE} {chain} {rule}"));
    }

    /// `nft ARGS` (split at whitespace) inside the namespace, panicking
    /// with its stderr.
    fn nft(&self, args: &str) {
        let mut command = self.command("nft");
        command.args(args.split_whitespace());
        run(command, None);
    }

    /// `nft -f -` inside the namespace with `script` on stdin.
    fn nft_script(&self, script: &str) {
        let mut command = self.command("nft");
        command.args(["-f", "-"]);
        run(command, Some(script));
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        remove(&self.name, &self.host_if);
    }
}

/// `ip netns exec NAME program`: [`NetNs::command`], for a caller that
/// keeps only the name (a broker restarted inside).
pub(crate) fn exec_in(name: &str, program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", name]).arg(program);
    command
}

/// Deletes the pair (both ends: the namespace's goes with the root's, even
/// while a process keeps the namespace alive) and the namespace's name.
/// Either may be missing; errors are ignored, there being nothing to do
/// about them in a drop.
fn remove(name: &str, host_if: &str) {
    for args in [&["link", "del", host_if][..], &["netns", "del", name][..]] {
        let _ = Command::new("ip")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `ip ARGS` (split at whitespace: names and addresses have none),
/// panicking with its stderr.
fn ip(args: &str) {
    let mut command = Command::new("ip");
    command.args(args.split_whitespace());
    run(command, None);
}

/// Runs `command` (`stdin` written to it when given) and panics with its
/// stderr unless it succeeds; a missing program panics naming its package.
fn run(mut command: Command, stdin: Option<&str>) {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown} ({e}): install iproute2 and nftables"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{shown}: write stdin: {e}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}): {} (nft missing? install nftables: scripts/test does)",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// The /30 for instance `n` of process `pid`: `(root side, inside)`.
///
/// 10.0.0.0/8 holds 2^22 /30s: the low 16 bits of the pid and 6 of the
/// instance number pick one, so concurrent test processes (distinct pids)
/// and the instances of one process get distinct subnets. Since that
/// cannot rule out a network of the machine's own, or a pid sharing its
/// low bits with another's, candidates that overlap a route of the root
/// namespace (a configured address, or another instance's pair) are
/// passed over for the next.
fn subnet(pid: u32, n: u32) -> (Ipv4Addr, Ipv4Addr) {
    subnet_among(pid, n, &root_routes())
}

/// [`subnet`], given the root namespace's routes.
fn subnet_among(pid: u32, n: u32, routes: &[(u32, u32)]) -> (Ipv4Addr, Ipv4Addr) {
    for step in 0..64u32 {
        let index = ((pid & 0xffff) << 6) | (n.wrapping_add(step) & 0x3f);
        let base = (10u32 << 24) | (index << 2);
        if routes.iter().any(|r| overlaps(*r, (base, 30))) {
            continue;
        }
        return (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
    }
    panic!(
        "no free /30 of 10.0.0.0/8 for instance {n} of pid {pid}: the root namespace's routes \
         cover them all ({routes:?})"
    );
}

/// Every IPv4 route of the root namespace, in every table (`local` holds
/// the configured addresses), as (network, prefix length); the default
/// route left out, since it overlaps everything and routes nothing of ours
/// once the pair's own route is there.
fn root_routes() -> Vec<(u32, u32)> {
    let output = Command::new("ip")
        .args(["-4", "-o", "route", "show", "table", "all"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip route` ({e}): install iproute2"));
    assert!(output.status.success(), "ip route show table all failed");
    const TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "throw",
        "unreachable",
        "prohibit",
        "blackhole",
        "nat",
        "anycast",
    ];
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let dest = line.split_whitespace().find(|w| !TYPES.contains(w))?;
            let (addr, len) = dest.split_once('/').unwrap_or((dest, "32"));
            Some((addr.parse::<Ipv4Addr>().ok()?.into(), len.parse().ok()?))
        })
        .collect()
}

/// Whether two prefixes share an address.
fn overlaps((a, a_len): (u32, u32), (b, b_len): (u32, u32)) -> bool {
    let len = a_len.min(b_len);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a & mask == b & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(text: &str) -> (u32, u32) {
        let (addr, len) = text.split_once('/').unwrap();
        (
            addr.parse::<Ipv4Addr>().unwrap().into(),
            len.parse().unwrap(),
        )
    }

    #[test]
    fn instances_and_processes_get_distinct_subnets() {
        let a = subnet_among(4242, 0, &[]);
        assert_eq!(
            a,
            (
                "10.16.146.1".parse().unwrap(),
                "10.16.146.2".parse().unwrap()
            )
        );
        assert_ne!(subnet_among(4242, 1, &[]), a);
        assert_ne!(subnet_among(4243, 0, &[]), a);
    }

    #[test]
    fn a_subnet_in_use_is_passed_over() {
        let first = subnet_among(4242, 0, &[]);
        // The machine's own address in it, or another instance's pair.
        let taken = [prefix("10.16.146.2/32"), prefix("192.0.2.0/24")];
        let next = subnet_among(4242, 0, &taken);
        assert_ne!(next, first);
        assert_eq!(next, subnet_among(4242, 1, &[]));
    }

    #[test]
    #[should_panic(expected = "no free /30")]
    fn a_machine_on_all_of_10_slash_8_gets_a_clear_panic() {
        subnet_among(4242, 0, &[prefix("10.0.0.0/8")]);
    }

    #[test]
    fn prefixes_overlap_when_one_contains_the_other() {
        assert!(overlaps(prefix("10.0.0.0/8"), prefix("10.1.2.4/30")));
        assert!(overlaps(prefix("10.1.2.5/32"), prefix("10.1.2.4/30")));
        assert!(!overlaps(prefix("10.1.2.8/30"), prefix("10.1.2.4/30")));
        assert!(!overlaps(prefix("127.0.0.0/8"), prefix("10.1.2.4/30")));
    }
}
