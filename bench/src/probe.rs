//! What a benchmark reads of the store it runs on: its CPU time and its
//! memory, on Redis, PostgreSQL, etcd or ZooKeeper, so that a table can
//! show the store's cost beside the broker's whichever store it is.
//!
//! CPU comes from /proc when the store runs on this machine (as in every
//! bench run): an overloaded store answers a query late, /proc does not.
//! Redis is one process (`INFO server`'s process_id). etcd is one process
//! too: the one named `etcd` listening on the first member's port of the
//! URL (as `heartbeats --etcd` finds it); of a cluster on this machine,
//! only that member is counted. ZooKeeper is a JVM, found the same way:
//! the process named `java` listening on the first member's port of the
//! URL (the whole JVM is counted: its request threads, and its garbage
//! collector and JIT compiler, which work for them). PostgreSQL is a tree
//! of processes: the postmaster, a backend per connection and background
//! workers; a backend that exits (its connection closed) is reaped by the
//! postmaster, so the kernel adds its CPU to the postmaster's cutime and
//! cstime (checked on PostgreSQL 15: they grow by a closed backend's CPU
//! once it exits). The tree's CPU so far is therefore the postmaster's own
//! and reaped time plus that of every live descendant: it does not fall
//! when a connection closes. Either way the whole server is counted, other
//! clients' work and the probe's own queries included (a few a second).

use std::sync::Arc;

use leasehold_server::store::schema_for;
use redis::aio::MultiplexedConnection;

/// A process's CPU counters from its /proc/<pid>/stat line, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub ppid: u32,
    /// User and system time of the process (all its threads).
    pub utime: u64,
    pub stime: u64,
    /// User and system time of its children that it has waited for.
    pub cutime: u64,
    pub cstime: u64,
    /// When it started, in ticks since boot.
    pub start_ticks: u64,
}

impl ProcStat {
    /// Parses a /proc/<pid>/stat line (proc(5)); `None` if it is not one.
    pub fn parse(stat: &str) -> Option<ProcStat> {
        // Fields after the command name (in parentheses, and it may hold
        // spaces and parentheses itself), from field 3 (state) on.
        let rest = stat.get(stat.rfind(')')? + 1..)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
        Some(ProcStat {
            ppid: u32::try_from(field(4)?).ok()?,
            utime: field(14)?,
            stime: field(15)?,
            cutime: field(16)?,
            cstime: field(17)?,
            start_ticks: field(22)?,
        })
    }

    /// The counters of process `pid`, if it exists.
    pub fn read(pid: u32) -> Option<ProcStat> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
}

/// Clock ticks per second, the unit of /proc's CPU times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// CPU seconds a process has used (user + system), from /proc (Linux); 0 if
/// it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    ProcStat::read(pid).map_or(0.0, |s| (s.utime + s.stime) as f64 / ticks_per_second())
}

/// The CPU ticks of the process tree under `root`, out of a snapshot of the
/// machine's processes: every process of the tree, its own time and that of
/// the children it reaped (a reaped child's own reaped children are in its
/// cutime already).
fn tree_ticks(root: u32, processes: &[(u32, ProcStat)]) -> u64 {
    let mut tree = vec![root];
    let mut total = 0;
    // Parents before children is not guaranteed (pids wrap): go until no
    // process is added.
    let mut left: Vec<&(u32, ProcStat)> = processes.iter().collect();
    loop {
        let before = left.len();
        left.retain(|(pid, stat)| {
            if *pid == root || tree.contains(&stat.ppid) {
                tree.push(*pid);
                total += stat.utime + stat.stime + stat.cutime + stat.cstime;
                false
            } else {
                true
            }
        });
        if left.len() == before {
            return total;
        }
    }
}

/// CPU seconds used so far by the process tree under `root` (see the module
/// doc), from /proc. A process reaped while the tree is read can be missed
/// (or counted twice) by that reading, not by the next: one connection's
/// time at most, and the benchmarks keep their connections open.
pub fn tree_cpu_seconds(root: u32) -> f64 {
    let processes: Vec<(u32, ProcStat)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, ProcStat::read(pid)?))
        })
        .collect();
    tree_ticks(root, &processes) as f64 / ticks_per_second()
}

/// The inodes of the sockets listening on TCP `port` in a /proc/net/tcp
/// (or tcp6) table's text: state 0A (LISTEN), the local port in hex after
/// the address.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
            (u16::from_str_radix(local_port, 16).ok()? == port && *fields.get(3)? == "0A")
                .then(|| fields.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The process listening on TCP `port` on this machine (in this network
/// namespace) if its command name is `command`: the owner of a listening
/// socket's inode among the file descriptors of /proc/*/fd (readable for
/// our own processes, or all as root); `None` if there is none or it is
/// another program (the port of a server elsewhere can be taken here by
/// something else).
pub fn listener_pid(port: u16, command: &str) -> Option<u32> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| listening_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let sockets: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            if comm.trim() != command {
                return None;
            }
            std::fs::read_dir(entry.path().join("fd"))
                .ok()?
                .flatten()
                .any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|target| {
                        sockets.iter().any(|s| target.as_os_str() == s.as_str())
                    })
                })
                .then_some(pid)
        })
}

/// The boot time (Unix seconds) from /proc/stat's text.
fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Whether a process that started `start_ticks` after a boot at `boot_s`
/// (Unix seconds) is the one a server says started at `started_s`: within
/// a few seconds (the server reads its clock a little after its exec; a
/// loaded machine).
fn same_start(start_ticks: u64, boot_s: f64, ticks_per_s: f64, started_s: f64) -> bool {
    (boot_s + start_ticks as f64 / ticks_per_s - started_s).abs() < 5.0
}

/// Where the store's CPU time is read on this machine.
#[derive(Clone, Copy, Debug)]
pub enum LocalCpu {
    /// One process (redis-server, etcd, ZooKeeper's JVM).
    Process(u32),
    /// A process and its descendants (PostgreSQL's postmaster).
    Tree(u32),
}

impl LocalCpu {
    /// CPU seconds used so far.
    pub fn seconds(&self) -> f64 {
        match *self {
            LocalCpu::Process(pid) => cpu_seconds(pid),
            LocalCpu::Tree(root) => tree_cpu_seconds(root),
        }
    }
}

/// The store's memory at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// The server's resident memory (Redis, and etcd or ZooKeeper when it
    /// runs here: see [`Probe::memory`]).
    pub rss_mib: Option<f64>,
    /// The data: Redis's used_memory, PostgreSQL's tables of the schema
    /// (etcd, ZooKeeper: not read).
    pub data_mib: Option<f64>,
}

impl Memory {
    /// The larger of each figure (a peak over samples).
    pub fn max(self, other: Memory) -> Memory {
        let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Memory {
            rss_mib: max(self.rss_mib, other.rss_mib),
            data_mib: max(self.data_mib, other.data_mib),
        }
    }
}

/// A connection of the bench's own to the store, for its figures.
#[derive(Clone)]
pub struct Probe {
    kind: Kind,
    local: Option<LocalCpu>,
}

#[derive(Clone)]
enum Kind {
    Redis(MultiplexedConnection),
    Postgres(Arc<tokio_postgres::Client>),
    /// Nothing to ask etcd: its CPU and RSS come from /proc only.
    Etcd,
    /// Nor ZooKeeper (its JVM's CPU and RSS from /proc).
    ZooKeeper,
}

impl Probe {
    /// Connects to the store at `url` when it is one Redis server or a
    /// PostgreSQL database; `None` for the other stores (memory, a Sentinel
    /// set, a Cluster: their figures are not read) and for a PostgreSQL URL
    /// asking for TLS (the bench has no TLS client for it; said on stderr).
    /// Spawns the connection's task on the current runtime. An etcd URL
    /// (`etcd://`, `etcds://`) connects to nothing: its probe reads the
    /// local etcd's /proc, if there is one (see the module doc); nor does
    /// a ZooKeeper URL (`zookeeper://`): the local JVM's.
    pub async fn connect(url: &str) -> Result<Option<Probe>, String> {
        if let Some(port) = crate::zookeeper::store_port(url) {
            return Ok(Some(Probe {
                kind: Kind::ZooKeeper,
                local: listener_pid(port, "java").map(LocalCpu::Process),
            }));
        }
        if let Some(member) = crate::etcd::store_member(url) {
            let port = member.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
            return Ok(Some(Probe {
                kind: Kind::Etcd,
                local: port
                    .and_then(|port| listener_pid(port, "etcd"))
                    .map(LocalCpu::Process),
            }));
        }
        if crate::plain::PlainLock::supports(url) {
            let mut conn = redis::Client::open(url)
                .map_err(|e| format!("bad Redis URL: {e}"))?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("cannot reach Redis: {e}"))?;
            let local = redis_local_pid(&mut conn).await.map(LocalCpu::Process);
            return Ok(Some(Probe {
                kind: Kind::Redis(conn),
                local,
            }));
        }
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Ok(None);
        }
        let redacted = leasehold_server::redact::url(url);
        if url.contains("sslmode=require") || url.contains("sslmode=verify-") {
            eprintln!("the database's CPU and size are not read over TLS ({redacted})");
            return Ok(None);
        }
        let client = postgres_client(url).await?;
        let local = postmaster(&client).await?.map(LocalCpu::Tree);
        Ok(Some(Probe {
            kind: Kind::Postgres(Arc::new(client)),
            local,
        }))
    }

    /// The store's name, for tables: `Redis`, `PostgreSQL`, `etcd` or
    /// `ZooKeeper`.
    pub fn store(&self) -> &'static str {
        match self.kind {
            Kind::Redis(_) => "Redis",
            Kind::Postgres(_) => "PostgreSQL",
            Kind::Etcd => "etcd",
            Kind::ZooKeeper => "ZooKeeper",
        }
    }

    /// Where the store's CPU is read, when it runs on this machine.
    pub fn local_cpu(&self) -> Option<LocalCpu> {
        self.local
    }

    /// The store's CPU seconds so far: from /proc when it runs on this
    /// machine, else what Redis's INFO says (PostgreSQL, etcd and
    /// ZooKeeper have no such figure: `None`).
    pub async fn cpu_seconds(&self) -> Result<Option<f64>, String> {
        if let Some(local) = self.local {
            return Ok(Some(local.seconds()));
        }
        match &self.kind {
            Kind::Redis(conn) => {
                let info = redis_info(conn.clone()).await?;
                Ok(Some(
                    info_field(&info, "used_cpu_sys") + info_field(&info, "used_cpu_user"),
                ))
            }
            Kind::Postgres(_) | Kind::Etcd | Kind::ZooKeeper => Ok(None),
        }
    }

    /// The store's memory now. Redis: the whole server's RSS and dataset
    /// (INFO). PostgreSQL: the on-disk size of the tables of the schema
    /// `key_prefix` names (with their indexes and TOAST, dead row versions
    /// not yet vacuumed included), read through the buffer cache; no RSS:
    /// the process tree's RSS counts the shared buffers once per process
    /// that touched them, which says little about the data. etcd and
    /// ZooKeeper: the server's RSS when it runs here (/proc), no data.
    pub async fn memory(&self, key_prefix: &str) -> Result<Memory, String> {
        match &self.kind {
            Kind::Redis(conn) => {
                let info = redis_info(conn.clone()).await?;
                Ok(Memory {
                    rss_mib: Some(info_field(&info, "used_memory_rss") / 1048576.0),
                    data_mib: Some(info_field(&info, "used_memory") / 1048576.0),
                })
            }
            Kind::Postgres(client) => {
                let schema = schema_for(key_prefix).map_err(|e| e.to_string())?;
                let bytes: f64 = client
                    .query_one(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::float8 \
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[&schema],
                    )
                    .await
                    .map_err(|e| format!("the size of schema {schema}: {e}"))?
                    .get(0);
                Ok(Memory {
                    rss_mib: None,
                    data_mib: Some(bytes / 1048576.0),
                })
            }
            Kind::Etcd | Kind::ZooKeeper => Ok(Memory {
                rss_mib: match self.local {
                    Some(LocalCpu::Process(pid)) => Some(crate::soak::rss_mib(pid)),
                    _ => None,
                },
                data_mib: None,
            }),
        }
    }
}

/// Redis's `INFO`.
/// A plain (no TLS) session of the bench's own on the PostgreSQL at `url`,
/// named `leasehold-bench` in `pg_stat_activity`, its connection driven by
/// a task of its own.
pub async fn postgres_client(url: &str) -> Result<tokio_postgres::Client, String> {
    let redacted = leasehold_server::redact::url(url);
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("bad PostgreSQL URL '{redacted}': {e}"))?;
    config
        .ssl_mode(tokio_postgres::config::SslMode::Disable)
        .application_name("leasehold-bench");
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL at {redacted}: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

async fn redis_info(mut conn: MultiplexedConnection) -> Result<String, String> {
    redis::cmd("INFO")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("INFO: {e}"))
}

/// A numeric field of an INFO reply (0 if absent).
fn info_field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// The pid of redis-server (`INFO server`'s process_id) when it runs on
/// this machine (its /proc entry is there, and is a redis process); else
/// `None`.
async fn redis_local_pid(conn: &mut MultiplexedConnection) -> Option<u32> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .ok()?;
    let pid: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))?
        .trim()
        .parse()
        .ok()?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    command.starts_with("redis").then_some(pid)
}

/// The postmaster's pid when PostgreSQL runs on this machine, else `None`:
/// the parent of this connection's backend (`pg_backend_pid()`), if that
/// process exists here, is named postgres, and started when the server
/// says it did (`pg_postmaster_start_time()`): a pid of a server elsewhere
/// (another machine, a container's pid namespace) names another process
/// here, if any.
async fn postmaster(client: &tokio_postgres::Client) -> Result<Option<u32>, String> {
    let row = client
        .query_one(
            "SELECT pg_backend_pid(), extract(epoch FROM pg_postmaster_start_time())::float8",
            &[],
        )
        .await
        .map_err(|e| format!("PostgreSQL's backend pid: {e}"))?;
    let (backend, started_s): (i32, f64) = (row.get(0), row.get(1));
    let found = || {
        let parent = ProcStat::read(u32::try_from(backend).ok()?)?.ppid;
        let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
        let boot_s = boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let stat = ProcStat::read(parent)?;
        (comm.trim() == "postgres"
            && same_start(stat.start_ticks, boot_s, ticks_per_second(), started_s))
        .then_some(parent)
    };
    Ok(found())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A postmaster's line (PostgreSQL 15 on Linux 6), then a backend's
    /// with a command name holding spaces and a parenthesis.
    const POSTMASTER: &str = "19449 (postgres) S 1 19448 19448 0 -1 4194560 1817 34519 0 \
        0 1 0 402 37 20 0 1 0 3975818 225853440 7325 18446744073709551615 1 1 0 0 0 0 \
        4194304 19935232 1610632967 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
    const ODD: &str = "42 (a b) c)) R 19449 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 \
        3975900 0 0 0";

    #[test]
    fn a_stat_line_gives_the_parent_the_times_and_the_start() {
        assert_eq!(
            ProcStat::parse(POSTMASTER),
            Some(ProcStat {
                ppid: 1,
                utime: 1,
                stime: 0,
                cutime: 402,
                cstime: 37,
                start_ticks: 3975818,
            })
        );
        let odd = ProcStat::parse(ODD).unwrap();
        assert_eq!((odd.ppid, odd.utime, odd.stime), (19449, 7, 3));
        assert_eq!(odd.start_ticks, 3975900);
        assert_eq!(ProcStat::parse("19449 (postgres) S 1 2"), None);
        assert_eq!(ProcStat::parse("no parenthesis"), None);
    }

    fn stat(ppid: u32, utime: u64, stime: u64, cutime: u64, cstime: u64) -> ProcStat {
        ProcStat {
            ppid,
            utime,
            stime,
            cutime,
            cstime,
            start_ticks: 0,
        }
    }

    #[test]
    fn a_tree_counts_its_root_every_descendant_and_what_they_reaped() {
        let processes = [
            // A grandchild listed before its parent (pids wrap).
            (5, stat(300, 1, 1, 0, 0)),
            (100, stat(1, 2, 1, 40, 6)),
            (200, stat(100, 10, 5, 0, 0)),
            (300, stat(100, 20, 0, 3, 1)),
            // Not under 100: its parent, and a sibling of the root.
            (1, stat(0, 1000, 1000, 1000, 1000)),
            (400, stat(1, 500, 0, 0, 0)),
        ];
        assert_eq!(tree_ticks(100, &processes), 49 + 15 + 24 + 2);
        assert_eq!(tree_ticks(300, &processes), 24 + 2);
        assert_eq!(tree_ticks(999, &processes), 0);
    }

    #[test]
    fn a_listening_socket_is_found_by_its_port_and_state() {
        // /proc/net/tcp: etcd's client (2379) and peer (2380) listeners, a
        // connection to 2379 (state 01), and a tcp6 listener on 2379.
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2369300 1 0 100 0 0 10 0\n\
            1: 0100007F:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2369299 1 0 100 0 0 10 0\n\
            2: 0100007F:C350 0100007F:094B 01 00000000:00000000 00:00000000 00000000  1000        0 2369500 1 0 20 4 30 10 -1\n";
        assert_eq!(listening_inodes(tcp, 2379), vec![2369300]);
        assert_eq!(listening_inodes(tcp, 2380), vec![2369299]);
        assert_eq!(listening_inodes(tcp, 50000), Vec::<u64>::new());
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 00000000000000000000000000000000:094B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 77 1 0 100 0 0 10 0\n";
        assert_eq!(listening_inodes(tcp6, 2379), vec![77]);
    }

    #[test]
    fn the_postmaster_is_the_process_that_started_when_the_server_says() {
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1796051563\nprocesses 9\n"),
            Some(1796051563.0)
        );
        assert_eq!(boot_time("cpu 1 2\n"), None);
        // Started 39,758.18 s after boot; the server read its clock 0.16 s
        // later.
        assert!(same_start(3975818, 1796051563.0, 100.0, 1796091321.34));
        assert!(!same_start(3975818, 1796051563.0, 100.0, 1796091421.34));
        assert!(!same_start(3975818, 1796051563.0, 100.0, 1796001321.34));
    }
}
