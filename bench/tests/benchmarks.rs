//! The load generators run end to end, against brokers of their own (the
//! `leasehold` binary the workspace built) on a real redis-server, and
//! print the rows the figures in BENCHMARKS.md come from.

use leasehold_testkit as common;

use std::process::Stdio;

use common::{Broker, EtcdServer, PostgresServer, RedisServer, ZooKeeperServer};
use leasehold_client::Client;
use tokio::process::Command;

async fn held(client: &Client, name: &str) -> bool {
    client.describe(name).await.unwrap().held
}

/// The heartbeat benchmark runs end to end and prints one row per lease count.
#[tokio::test]
async fn the_keepalive_benchmark_runs() {
    let broker = Broker::start("memory").await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"));
    command
        .args([
            "keepalive",
            "--broker",
            &broker.url(),
            "--leases",
            "1,20",
            "--duration",
            "200ms",
        ])
        .stdout(Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = child.id().unwrap();
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!((rows[0][0], rows[1][0]), ("1", "20"));
    for row in rows {
        let beats: u64 = row[1].parse().unwrap();
        let p50: u64 = row[2].parse().unwrap();
        let p99: u64 = row[3].parse().unwrap();
        assert!(beats > 0 && p50 > 0 && p50 <= p99, "{text}");
    }
    // It cleans up after itself.
    let client = Client::connect(broker.url()).await.unwrap();
    for lease in ["1/0", "20/0", "20/19"] {
        assert!(
            !held(&client, &format!("bench/keepalive/{pid}/{lease}")).await,
            "{lease} left held"
        );
    }
}

/// Runs `leasehold-bench <args>` to its end and returns what it printed;
/// fails the test, showing both outputs, if it did not exit 0.
async fn bench(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
        .env("LEASEHOLD_BIN", common::leasehold_binary())
        // The brokers the bench starts inherit it: on a loaded 2-core
        // machine an fsync'ing etcd answered a grant past the default 1 s
        // once (a run aborts at its first failed call).
        .env("LEASEHOLD_STORE_TIMEOUT", "5s")
        .args(args)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the run failed: {text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// The first line of `text` starting with `prefix`.
fn row<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} row in\n{text}"))
}

/// The cycles benchmark runs end to end against a broker of its own,
/// straight against Redis with the broker's scripts and with a plain Redis
/// lock, and prints its rows: throughput, the CPU of each cycle, fairness
/// and handoffs, failovers.
#[tokio::test]
async fn the_cycles_benchmark_runs() {
    let redis = RedisServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &redis.url(),
        "--workers",
        "1,2",
        "--contended",
        "2",
        "--duration",
        "300ms",
        "--failovers",
        "1",
        "--failover-ttl",
        "1s",
    ])
    .await;
    // A killed holder's lock goes to the waiter when its lease expires:
    // within its TTL of the kill (generous slack for a loaded machine), and
    // not long after the expiry (no polling).
    for side in ["broker", "direct"] {
        let line = row(&text, &format!("holder killed, {side}"));
        let numbers: Vec<f64> = line
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter_map(|n| n.parse().ok())
            .collect();
        // "kill 9 -> next grant K ms; expiry -> grant E ms, in Redis R ms
        // (TTL 1000 ms)"
        let (kill_to_grant, expiry_to_grant, in_redis) = (numbers[1], numbers[2], numbers[3]);
        assert!(kill_to_grant <= 1_000.0 + 750.0, "{line}");
        assert!(expiry_to_grant <= 500.0, "{line}");
        // Never before the expiry, in Redis' own clock.
        assert!((0.0..=500.0).contains(&in_redis), "{line}");
    }
    for workers in [1, 2] {
        let name = format!("uncontended, {workers} workers");
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&name)).collect();
        // The broker rows (unary calls, Session streams), the plain
        // lock's, the CPU per cycle.
        assert_eq!(lines.len(), 4, "{text}");
        for (line, says) in [
            (lines[1], "cycles/s over Session streams"),
            (lines[2], "cycles/s with a plain Redis lock"),
        ] {
            let rest = line[name.len()..].trim_start();
            assert!(rest.contains(says), "{text}");
            let per_s: f64 = rest.split_whitespace().next().unwrap().parse().unwrap();
            assert!(per_s > 0.0, "{text}");
        }
        let cpu = lines[3];
        let figures: Vec<f64> = cpu[name.len()..]
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter_map(|n| n.parse().ok())
            .collect();
        // broker, Redis, load generator; session: broker, Redis, load
        // generator; direct: Redis, load generator; plain: Redis, load
        // generator (Redis runs here: its CPU is read).
        assert!(cpu.contains("CPU µs per cycle: broker"), "{text}");
        assert_eq!(figures.len(), 10, "{cpu}");
        assert!(figures[0] > 0.0 && figures[2] > 0.0, "{cpu}");
        assert!(figures[3] > 0.0 && figures[5] > 0.0, "{cpu}");
    }
    let plain = row(&text, "one lock, 2 waiters, plain lock polling every 2 ms");
    assert!(
        plain.contains("handoffs/s") && plain.contains("grants per worker"),
        "{plain}"
    );
    // The contended waiters over one Session stream: the grants go to a
    // worker other than the last holder (a FIFO line of two; the first
    // grant of the run follows no holder, hence not all of them).
    let session = row(&text, "one lock, 2 waiters, one Session stream");
    let figures: Vec<f64> = session["one lock, 2 waiters, one Session stream".len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(figures[0] > 0.0, "{session}");
    assert!(figures[1] >= 0.9 * figures[0], "{session}");
    for name in [
        "uncontended, 1 workers",
        "uncontended, 2 workers",
        "one lock, 2 waiters",
    ] {
        let line = row(&text, name);
        let first: f64 = line[name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(first > 0.0, "{line}");
    }
}

/// `cycles --connections each` gives every worker a connection of its own
/// (to the broker, and to Redis for the plain lock): each side still runs.
#[tokio::test]
async fn the_cycles_benchmark_runs_with_a_connection_per_worker() {
    let redis = RedisServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &redis.url(),
        "--workers",
        "3",
        "--contended",
        "0",
        "--duration",
        "300ms",
        "--failovers",
        "0",
        "--connections",
        "each",
    ])
    .await;
    let name = "uncontended, 3 workers";
    for says in [
        "cycles/s over Session streams",
        "cycles/s with a plain Redis lock",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l.contains(says))
            .unwrap_or_else(|| panic!("no {says:?} row in\n{text}"));
        let per_s: f64 = line[name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(per_s > 0.0, "{line}");
    }
}

/// `cycles --etcd` runs every scenario on etcd's lock service too, beside
/// the broker: uncontended cycles, a contended lock (its handoffs and
/// fairness) and a killed holder (the next grant within the TTL and a
/// margin of the kill; at a TTL of 1 s etcd's expiry is not read, etcd
/// telling a time to live in whole seconds: it shows "-").
#[tokio::test]
async fn the_cycles_benchmark_runs_on_etcd_too() {
    let redis = RedisServer::start();
    let etcd = EtcdServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &redis.url(),
        "--etcd",
        &etcd.url(),
        "--workers",
        "1",
        "--contended",
        "2",
        "--duration",
        "300ms",
        "--failovers",
        "1",
        "--failover-ttl",
        "1s",
    ])
    .await;
    let first_number = |line: &str, after: &str| -> f64 {
        line[after.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no figure in {line}"))
    };
    let uncontended = text
        .lines()
        .find(|l| l.starts_with("uncontended, 1 workers") && l.contains("cycles/s on etcd"))
        .unwrap_or_else(|| panic!("no etcd row: {text}"));
    assert!(
        first_number(uncontended, "uncontended, 1 workers") > 0.0,
        "{uncontended}"
    );
    assert!(
        uncontended.contains("etcd Lock p50/p99/p999"),
        "{uncontended}"
    );
    let contended = row(&text, "one lock, 2 waiters, etcd");
    assert!(
        first_number(contended, "one lock, 2 waiters, etcd") > 0.0,
        "{contended}"
    );
    assert!(contended.contains("grants per worker"), "{contended}");
    let killed = row(&text, "holder killed, etcd");
    let kill_to_grant: f64 = killed
        .split("next grant ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kill -> grant figure: {killed}"));
    // etcd's lease TTL is in whole seconds, at least its minimum (its
    // leader's election timeout): within the TTL and its keep-alive
    // margins of the kill, generous for a loaded machine.
    assert!(kill_to_grant <= 6_000.0, "{killed}");
    assert!(killed.contains("expiry -> grant -"), "{killed}");
}

/// On an etcd store, `cycles` reads etcd's CPU per cycle (the etcd process
/// listening on the URL's port: it runs here), and a killed holder's expiry
/// (its etcd lease's, from its time to live) on the broker and on etcd's
/// lock service: each waiter granted after it, within etcd's lease checks
/// (every 500 ms) and a margin for a loaded machine.
#[tokio::test]
async fn the_cycles_benchmark_runs_on_an_etcd_store() {
    let etcd = EtcdServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &etcd.store_url(),
        "--etcd",
        &etcd.url(),
        "--workers",
        "1",
        "--contended",
        "2",
        "--duration",
        "300ms",
        "--failovers",
        "1",
        "--failover-ttl",
        "2s",
    ])
    .await;
    let cpu = text
        .lines()
        .find(|l| l.starts_with("uncontended, 1 workers") && l.contains("CPU µs per cycle"))
        .unwrap_or_else(|| panic!("no CPU row: {text}"));
    let etcd_cpu: f64 = cpu
        .split(" + etcd ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no etcd CPU per cycle: {cpu}"));
    assert!(etcd_cpu > 0.0, "{cpu}");
    for side in ["broker", "etcd"] {
        let killed = row(&text, &format!("holder killed, {side}"));
        let expiry_to_grant: f64 = killed
            .split("expiry -> grant ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no expiry -> grant figure: {killed}"));
        assert!((-50.0..=1_500.0).contains(&expiry_to_grant), "{killed}");
    }
}

/// On a ZooKeeper store, `cycles` runs every scenario through the broker
/// and straight through the store layer: uncontended cycles (unary and
/// Session), with ZooKeeper's CPU per cycle (its JVM, the `java` process
/// listening on the URL's port: it runs here), a contended lock, and a
/// killed holder whose lease's expiry is read off its lock node (last
/// renewal's `mtime` plus TTL): the waiter granted after it, in the
/// leader's clock too.
#[tokio::test]
async fn the_cycles_benchmark_runs_on_zookeeper() {
    let zookeeper = ZooKeeperServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &zookeeper.url(),
        "--workers",
        "1,2",
        "--contended",
        "2",
        "--duration",
        "300ms",
        "--failovers",
        "1",
        "--failover-ttl",
        "2s",
    ])
    .await;
    let first_number = |line: &str, after: &str| -> f64 {
        line[after.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no figure in {line}"))
    };
    for workers in [1, 2] {
        let name = format!("uncontended, {workers} workers");
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&name)).collect();
        // The throughput rows (unary, Session) and the CPU per cycle (no
        // plain Redis lock here).
        assert_eq!(lines.len(), 3, "{text}");
        assert!(first_number(lines[0], &name) > 0.0, "{text}");
        assert!(
            lines[1].contains("cycles/s over Session streams")
                && first_number(lines[1], &name) > 0.0,
            "{text}"
        );
        let cpu = lines[2];
        assert!(
            cpu.contains("+ ZooKeeper ") && cpu.contains("direct: ZooKeeper "),
            "{cpu}"
        );
        // broker, ZooKeeper, load generator; session: the same three;
        // direct: ZooKeeper, load generator.
        let figures: Vec<f64> = cpu[name.len()..]
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter_map(|n| n.parse().ok())
            .collect();
        assert_eq!(figures.len(), 8, "{cpu}");
        assert!(figures[0] > 0.0 && figures[3] > 0.0, "broker: {cpu}");
        assert!(
            figures[1] > 0.0 && figures[4] > 0.0 && figures[6] > 0.0,
            "ZooKeeper: {cpu}"
        );
    }
    for name in [
        "one lock, 2 waiters",
        "one lock, 2 waiters, one Session stream",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {name:?} row in\n{text}"));
        assert!(first_number(line, name) > 0.0, "{line}");
        assert!(line.contains("grants per worker"), "{line}");
    }
    for side in ["broker", "direct"] {
        let line = row(&text, &format!("holder killed, {side}"));
        let figure = |after: &str| -> f64 {
            line.split(after)
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {after:?} figure: {line}"))
        };
        // Within the TTL (2 s) and a margin of the kill; the grant after
        // the lease's expiry and not long after it (a loaded machine).
        assert!(figure("next grant ") <= 2_000.0 + 1_500.0, "{line}");
        assert!(
            (-50.0..=1_500.0).contains(&figure("expiry -> grant ")),
            "{line}"
        );
        // Never before the expiry, in the leader's own clock.
        assert!((0.0..=1_500.0).contains(&figure("in ZooKeeper ")), "{line}");
    }
}

/// On a ZooKeeper store, the heartbeat benchmark keeps leases alive through
/// a broker of its own and straight through the store layer, loses none,
/// and reports ZooKeeper's CPU and RSS (its JVM, read from /proc: it runs
/// here) in columns named after the store; its data is not read.
#[tokio::test]
async fn the_heartbeats_benchmark_runs_on_zookeeper() {
    let zookeeper = ZooKeeperServer::start();
    let text = bench(&[
        "heartbeats",
        "--store",
        &zookeeper.url(),
        "--leases",
        "200",
        "--streams",
        "2",
        "--interval",
        "200ms",
        "--ttl",
        "5s",
        "--duration",
        "2s",
    ])
    .await;
    assert!(
        row(&text, "2 KeepAlive streams").ends_with("on ZooKeeper"),
        "{text}"
    );
    let header = row(&text, " leases");
    for column in ["ZooKeeper CPU", "ZooKeeper RSS MiB", "ZooKeeper data"] {
        assert!(header.contains(column), "{header}");
    }
    for side in ["broker", "direct"] {
        let fields = heartbeats_row(&text, "200", side);
        let line = fields.join(" ");
        // leases, side, "p50/p99 ms", lost, broker RSS and CPU, then
        // ZooKeeper's CPU, RSS and data (not read: "-").
        let (p50, p99) = fields[2].split_once('/').unwrap();
        let (p50, p99): (f64, f64) = (p50.parse().unwrap(), p99.parse().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "renewals: {line}");
        assert_eq!(fields[4], "0", "lost: {line}");
        let end = fields.len();
        assert_eq!(fields[end - 1], "-", "{line}");
        let cpu: f64 = fields[end - 3]
            .strip_suffix('%')
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no ZooKeeper CPU in {line}"));
        assert!(cpu > 0.0, "{line}");
        let rss: f64 = fields[end - 2].parse().unwrap();
        assert!(rss > 0.0, "{line}");
    }
}

/// The waiters benchmark fills the line, holds it, and hands the lock down
/// it: every waiter counted in line, handoffs measured, no call failed.
#[tokio::test]
async fn the_waiters_benchmark_runs() {
    let redis = RedisServer::start();
    let text = bench(&[
        "waiters",
        "--store",
        &redis.url(),
        "--waiters",
        "50",
        "--hold",
        "500ms",
        "--duration",
        "1s",
    ])
    .await;
    let line = |prefix: &str| row(&text, prefix).to_owned();
    assert!(line("line: ").starts_with("line: 50 waiting"), "{text}");
    let handoffs = line("handoffs ");
    let count: u64 = handoffs
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{handoffs}"));
    assert!(count > 0, "{handoffs}");
    assert!(handoffs.ends_with(" 0 failed calls"), "{handoffs}");
    assert!(line("held ").ends_with(" 0 failed calls"), "{text}");
}

/// The heartbeat benchmark keeps leases alive through a broker of its own
/// and straight against Redis, loses none, and reports both sides.
#[tokio::test]
async fn the_heartbeats_benchmark_runs() {
    let redis = RedisServer::start();
    let text = bench(&[
        "heartbeats",
        "--store",
        &redis.url(),
        "--leases",
        "300",
        "--streams",
        "6",
        "--interval",
        "500ms",
        "--ttl",
        "5s",
        "--duration",
        "2s",
    ])
    .await;
    for side in ["broker", "direct"] {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["300", side]))
            .unwrap_or_else(|| panic!("no {side} row in\n{text}"));
        let lost: u64 = line.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(lost, 0, "{line}");
    }
    // Every lease was released afterwards: Redis holds no lease of the run,
    // only the release records (which expire) and the fence counter.
    let mut redis_conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("beats*")
        .query_async(&mut redis_conn)
        .await
        .unwrap();
    // The release records (`<lease>:end:<token>`) expire by themselves;
    // the lease records must hold no owner.
    for key in keys
        .iter()
        .filter(|k| !k.ends_with("fences") && !k.contains(":end:"))
    {
        let record = leasehold_server::store::read_record(&mut redis_conn, key)
            .await
            .unwrap();
        assert_eq!(record, None, "{key} is still held");
    }
}

/// The fields of the first row of `text` whose first two are `leases` and
/// `side` (a `heartbeats` row).
fn heartbeats_row<'a>(text: &'a str, leases: &str, side: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.len() > 2 && fields[..2] == [leases, side])
        .unwrap_or_else(|| panic!("no {leases} {side} row in\n{text}"))
}

/// The broker's side of `heartbeats` leaves the broker no lease to look at
/// once its streams end: the side's last heartbeat finds its leases
/// released. Before, each stream ended holding them, and the broker looked
/// at every one past its TTL, a store call each, during the direct side's
/// measurement, which then showed Redis doing twice the work per renewal.
/// Counted in Redis's own command statistics: each side acquires and
/// releases its leases (a script call each) and renews them a batch per
/// heartbeat; the looks would be one call per lease more.
#[tokio::test]
async fn the_heartbeats_broker_side_leaves_no_lease_to_look_at() {
    let redis = RedisServer::start();
    let leases = 300;
    let text = bench(&[
        "heartbeats",
        "--store",
        &redis.url(),
        "--leases",
        &leases.to_string(),
        "--streams",
        "6",
        "--interval",
        "300ms",
        "--ttl",
        "1s",
        "--duration",
        "2500ms",
    ])
    .await;
    let mut conn = redis.connection().await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The scripts' runs: FCALLs of the library's functions (EVALSHAs where
    // Redis refuses functions).
    let count = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let calls = count("fcall") + count("evalsha");
    assert!(calls > 0, "no FCALL or EVALSHA count in\n{stats}");
    // Acquires and releases: 4 per lease. Heartbeats: 6 streams a side,
    // one batch each, every 300 ms for 2.5 s (at most 10 each), and a last
    // one each. The first calls of each function on a fresh Redis, sent at
    // once (64 acquires, 64 releases, 6 heartbeats), are answered "Function
    // not found" and sent again once the library is loaded. Looks at 300
    // leases would exceed the bound by far.
    let bound = 4 * leases + (64 + 64 + 6) + 2 * 6 * 10 + 6;
    assert!(
        calls <= bound,
        "{calls} script calls, more than {bound}:\n{text}"
    );
}

/// `heartbeats --heartbeats session` keeps the leases alive with heartbeats
/// sent as messages of Session streams: with a TTL shorter than the run,
/// none is lost.
#[tokio::test]
async fn the_heartbeats_benchmark_runs_over_session_streams() {
    let redis = RedisServer::start();
    let text = bench(&[
        "heartbeats",
        "--store",
        &redis.url(),
        "--leases",
        "200",
        "--streams",
        "4",
        "--interval",
        "300ms",
        "--ttl",
        "1500ms",
        "--duration",
        "3s",
        "--heartbeats",
        "session",
    ])
    .await;
    assert!(
        row(&text, "4 Session streams").contains("on Redis"),
        "{text}"
    );
    let fields = heartbeats_row(&text, "200", "broker");
    assert_eq!(fields[4], "0", "lost: {}", fields.join(" "));
}

/// On PostgreSQL, the heartbeat benchmark keeps leases alive through a
/// broker of its own and straight through the store layer, loses none, and
/// reports the database's CPU (its process tree, read from /proc) and the
/// size of each side's tables, in columns named after the store.
#[tokio::test]
async fn the_heartbeats_benchmark_runs_on_postgres() {
    let postgres = PostgresServer::start();
    let text = bench(&[
        "heartbeats",
        "--store",
        &postgres.url(),
        "--leases",
        "200",
        "--streams",
        "2",
        "--interval",
        "100ms",
        "--ttl",
        "5s",
        "--duration",
        "2s",
    ])
    .await;
    assert!(
        row(&text, "2 KeepAlive streams").ends_with("on PostgreSQL"),
        "{text}"
    );
    let header = row(&text, " leases");
    for column in ["PostgreSQL CPU", "PostgreSQL RSS MiB", "PostgreSQL data"] {
        assert!(header.contains(column), "{header}");
    }
    for side in ["broker", "direct"] {
        let fields = heartbeats_row(&text, "200", side);
        let line = fields.join(" ");
        // leases, side, "p50/p99 ms", lost, broker RSS and CPU, then the
        // database's CPU, RSS (not read: "-") and data ("N MiB").
        let (p50, p99) = fields[2].split_once('/').unwrap();
        let (p50, p99): (f64, f64) = (p50.parse().unwrap(), p99.parse().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "renewals: {line}");
        assert_eq!(fields[4], "0", "lost: {line}");
        let end = fields.len();
        assert_eq!(fields[end - 1], "MiB", "{line}");
        let cpu: f64 = fields[end - 4]
            .strip_suffix('%')
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no database CPU in {line}"));
        assert!(cpu > 0.0, "{line}");
        assert_eq!(fields[end - 3], "-", "{line}");
        let data: f64 = fields[end - 2].parse().unwrap();
        assert!(data > 0.0, "{line}");
    }
    // Every lease was released afterwards: no row of either side's schema
    // holds a token (a released lease leaves a tombstone without one, and
    // a held lease's row stays at least until it expires).
    let (client, connection) = tokio_postgres::connect(&postgres.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let schemas: Vec<String> = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'beats%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(schemas.len(), 2, "one schema per side: {schemas:?}");
    for schema in schemas {
        let held: i64 = client
            .query_one(&format!("SELECT count(token) FROM {schema}.leases"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(held, 0, "leases still held in {schema}");
    }
}

/// With `--etcd`, the heartbeat benchmark keeps as many etcd leases alive
/// over as many LeaseKeepAlive streams (a request per lease), loses none,
/// reports etcd's row (its CPU and RSS, read from /proc: it runs here) in
/// the store's columns, its keep-alives per second, and revokes its leases.
#[tokio::test]
async fn the_heartbeats_benchmark_runs_on_etcd_too() {
    let redis = RedisServer::start();
    let etcd = EtcdServer::start();
    let text = bench(&[
        "heartbeats",
        "--store",
        &redis.url(),
        "--etcd",
        &etcd.url(),
        "--leases",
        "200",
        "--streams",
        "2",
        "--interval",
        "200ms",
        "--ttl",
        "5s",
        "--duration",
        "2s",
    ])
    .await;
    assert!(row(&text, "etcd: ").contains("CPU and RSS"), "{text}");
    let fields = heartbeats_row(&text, "200", "etcd");
    let line = fields.join(" ");
    // leases, side, "p50/p99 ms", lost, broker RSS and CPU (none: "-"),
    // then etcd's CPU, RSS, data (not read: "-"), and "N keep-alives/s".
    assert_eq!(fields.len(), 12, "{line}");
    let (p50, p99) = fields[2].split_once('/').unwrap();
    let (p50, p99): (f64, f64) = (p50.parse().unwrap(), p99.parse().unwrap());
    assert!(p50 > 0.0 && p50 <= p99, "renewals: {line}");
    assert_eq!(fields[4], "0", "lost: {line}");
    assert_eq!(fields[5..7], ["-", "-"], "{line}");
    let cpu: f64 = fields[7]
        .strip_suffix('%')
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no etcd CPU in {line}"));
    assert!(cpu > 0.0, "{line}");
    let rss: f64 = fields[8].parse().unwrap();
    assert!(rss > 0.0, "{line}");
    assert_eq!(fields[9], "-", "{line}");
    // 200 leases every 200 ms for 2 s: ~1,000 a second; at least a third of
    // that on a loaded machine.
    let per_s: f64 = fields[10].parse().unwrap();
    assert!(per_s > 330.0, "{line}");
    assert_eq!(fields[11], "keep-alives/s", "{line}");
    // The broker's and the direct rows are there as before.
    for side in ["broker", "direct"] {
        assert_eq!(heartbeats_row(&text, "200", side)[4], "0", "{text}");
    }
    // Every etcd lease was revoked: etcd lists none (its JSON gateway's
    // LeaseLeases leaves `leases` out when there are none).
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", etcd.port()))
        .await
        .unwrap();
    let request = "POST /v3/lease/leases HTTP/1.1\r\nHost: 127.0.0.1\r\n\
        Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    tokio::io::AsyncWriteExt::write_all(&mut conn, request.as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut conn, &mut answer)
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"header\""), "{answer}");
    assert!(!answer.contains("\"leases\""), "leases left: {answer}");
}

/// On PostgreSQL, the cycles benchmark reads the database's CPU per cycle
/// (its process tree: the backends of the broker's and the direct side's
/// connections, and the postmaster) as it does Redis's.
#[tokio::test]
async fn the_cycles_benchmark_reads_the_database_cpu_on_postgres() {
    let postgres = PostgresServer::start();
    let text = bench(&[
        "cycles",
        "--store",
        &postgres.url(),
        "--workers",
        "1",
        "--contended",
        "0",
        "--failovers",
        "0",
        "--duration",
        "500ms",
    ])
    .await;
    let name = "uncontended, 1 workers";
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(name)).collect();
    // The throughput rows (unary, Session) and the CPU per cycle (no plain
    // Redis lock here).
    assert_eq!(lines.len(), 3, "{text}");
    let cycles: f64 = lines[0][name.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cycles > 0.0, "{text}");
    let cpu = lines[2];
    assert!(
        cpu.contains("broker ")
            && cpu.contains("+ PostgreSQL ")
            && cpu.contains("direct: PostgreSQL "),
        "{cpu}"
    );
    // broker, PostgreSQL, load generator; session: the same three;
    // direct: PostgreSQL, load generator.
    let figures: Vec<f64> = cpu[name.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(figures.len(), 8, "{cpu}");
    assert!(
        figures[1] > 0.0 && figures[4] > 0.0 && figures[6] > 0.0,
        "{cpu}"
    );
}

/// The floor benchmark serves the floor itself (a bare tonic server, a
/// child process), drives it through the bench's HTTP/2 client, a bare tonic
/// Channel and the client library, and prints each one's throughput and the
/// CPU a cycle costs server and load generator, then the client library's
/// CPU per cycle against the bare Channel's.
#[tokio::test]
async fn the_floor_benchmark_runs() {
    // Not `bench`: no broker, so no `leasehold` binary needed.
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold-bench"))
        .args(["floor", "--workers", "4", "--duration", "1s"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the run failed: {text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for label in [
        "bench HTTP/2 client",
        "Session stream, bare",
        "tonic Channel, bare",
        "leasehold_client::Client",
    ] {
        let line = row(&text, label);
        // workers, cycles/s, acquire p50/p99 µs, server and load generator
        // CPU µs per cycle.
        let fields: Vec<&str> = line[label.len()..].split_whitespace().collect();
        assert_eq!(fields.len(), 5, "{text}");
        assert_eq!(fields[0], "4", "{line}");
        let figure = |i: usize| -> f64 { fields[i].parse().unwrap_or_else(|_| panic!("{line}")) };
        let (per_s, server_us, load_us) = (figure(1), figure(3), figure(4));
        assert!(per_s > 0.0 && server_us > 0.0 && load_us > 0.0, "{line}");
        let (p50, p99) = fields[2]
            .split_once('/')
            .unwrap_or_else(|| panic!("{line}"));
        let (p50, p99): (u64, u64) = (p50.parse().unwrap(), p99.parse().unwrap());
        assert!(p50 > 0 && p50 <= p99, "{line}");
    }
    let line = row(
        &text,
        "client/bare load generator CPU per cycle, 4 workers: ",
    );
    let ratio: f64 = line
        .rsplit_once("= ")
        .and_then(|(_, r)| r.split_once('x'))
        .and_then(|(r, _)| r.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(ratio > 0.0, "{line}");
}

/// `etcd-mapping` (the etcd store's design study, BENCHMARKS.md) runs every
/// mapping against a real etcd, and what it says each cycle writes is what
/// etcd committed: the Raft writes counted from the code match the change
/// of `etcd_server_proposals_committed_total`.
#[tokio::test]
async fn the_etcd_mapping_study_counts_what_etcd_committed() {
    let etcd = EtcdServer::start();
    let text = bench(&[
        "etcd-mapping",
        "--etcd",
        &etcd.url(),
        "--workers",
        "2",
        "--duration",
        "1s",
        "--leases",
        "50",
        "--runs",
        "1",
    ])
    .await;
    for mapping in [
        "(a) lease per grant",
        "(a') lease per grant",
        "(b) key",
        "(c) (a)",
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(mapping) && l.contains("Raft writes/cycle"))
            .unwrap_or_else(|| panic!("no {mapping:?} row in\n{text}"));
        let after = |label: &str| -> f64 {
            let rest = &line[line.find(label).unwrap_or_else(|| panic!("{line}")) + label.len()..];
            rest.trim_start()
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no number after {label:?}: {line}"))
        };
        let counted = after("Raft writes/cycle");
        let committed = after("committed proposals:");
        assert!(counted >= 2.0, "{line}");
        assert!(
            (committed - counted).abs() < 0.1,
            "etcd committed {committed} writes per cycle, the code counts {counted}: {line}"
        );
        assert!(after("cycles/s") > 0.0, "{line}");
    }
    assert!(text.contains("renewal of 50 leases"), "{text}");
}

/// The figures of `text` after `label` up to the next `;`: the numbers of
/// a "min / median / max" (and their unit).
fn figures_after(line: &str, label: &str) -> Vec<f64> {
    let at = line
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line}"));
    line[at + label.len()..]
        .split(';')
        .next()
        .unwrap()
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// `list` fills a Redis with held names through a broker of its own, times
/// pages of 100 and 1000 from the start and the middle of the walk in the
/// broker and in Redis (SCAN and the describes, from its command
/// statistics), walks every name, has a census broker count them, and
/// releases them.
#[tokio::test]
async fn the_list_benchmark_runs() {
    let redis = RedisServer::start();
    let text = bench(&[
        "list",
        "--store",
        &redis.url(),
        "--names",
        "300",
        "--runs",
        "2",
        "--census-interval",
        "500ms",
    ])
    .await;
    assert!(
        row(&text, "list: 300 names held on Redis").contains("2 runs each"),
        "{text}"
    );
    for label in [
        "page of 100, first:",
        "page of 100, middle:",
        "page of 1000, first:",
        "page of 1000, middle:",
    ] {
        let line = row(&text, label);
        let broker = figures_after(line, "broker ");
        assert_eq!(broker.len(), 3, "{line}");
        assert!(broker[0] > 0.0 && broker[0] <= broker[2], "{line}");
        // Redis's own time: a SCAN per page, and the names' describes.
        let scan = figures_after(line, "Redis SCAN ");
        assert!(scan.len() >= 3 && scan[0] > 0.0, "{line}");
        assert!(line.contains(" describes "), "{line}");
    }
    // A page of 1000 of 300 names lists them all.
    assert!(
        row(&text, "page of 1000, first:").ends_with("300 / 300 / 300 entries"),
        "{text}"
    );
    let walk = row(&text, "walk in pages of 1000:");
    assert!(walk.contains("; 300 / 300 / 300 distinct names;"), "{walk}");
    let census = row(&text, "census every 500ms:");
    assert!(census.contains("complete 2 of 2"), "{census}");
    let took = figures_after(census, "census every 500ms: ");
    assert!(took[0] > 0.0, "{census}");
    // Every name was released afterwards.
    let mut conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("list*")
        .query_async(&mut conn)
        .await
        .unwrap();
    for key in keys
        .iter()
        .filter(|k| !k.ends_with("fences") && !k.contains(":end:") && !k.contains("@census"))
    {
        let record = leasehold_server::store::read_record(&mut conn, key)
            .await
            .unwrap();
        assert_eq!(record, None, "{key} is still held");
    }
}

/// On PostgreSQL, `list` runs the same, and says so when the server does
/// not preload pg_stat_statements (the tests' servers do not): the
/// database's time is not read.
#[tokio::test]
async fn the_list_benchmark_runs_on_postgres() {
    let postgres = PostgresServer::start();
    let text = bench(&[
        "list",
        "--store",
        &postgres.url(),
        "--names",
        "150",
        "--runs",
        "1",
        "--census-interval",
        "500ms",
    ])
    .await;
    row(&text, "list: 150 names held on PostgreSQL");
    let line = row(&text, "page of 100, first:");
    assert!(figures_after(line, "broker ")[0] > 0.0, "{line}");
    if text.contains("PostgreSQL's time not read") {
        assert!(line.contains("PostgreSQL time not read"), "{line}");
    } else {
        assert!(line.contains("PostgreSQL list() "), "{line}");
    }
    assert!(
        row(&text, "page of 100, first:").ends_with("100 / 100 / 100 entries"),
        "{text}"
    );
    let walk = row(&text, "walk in pages of 1000:");
    assert!(
        walk.contains("; 2 / 2 / 2 pages;") || walk.contains("; 1 / 1 / 1 pages;"),
        "{walk}"
    );
    assert!(walk.contains("; 150 / 150 / 150 distinct names;"), "{walk}");
    assert!(
        row(&text, "census every 500ms:").contains("complete 1 of 1"),
        "{text}"
    );
}
