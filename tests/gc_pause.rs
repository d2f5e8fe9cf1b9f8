//! The source article's GC-pause story, end to end, with a real paused
//! process: a holder checks its lease, is paused (SIGSTOP) past its TTL,
//! its successor takes the lock with a higher fence and writes, and the
//! holder, resumed, makes the write it had decided on. The fence guard of
//! the data layer (the Rust client's `fence` module on a real PostgreSQL)
//! refuses that late write; for a side effect that stores nothing,
//! CheckFence right before it does.
//!
//! The holder is `clients/rust/examples/fenced_writer.rs`, a program that
//! uses the client as any application would, compiled into this test
//! binary as well and run in a process of its own ([`holder_a`]).

use leasehold_testkit as common;

use std::{process::Stdio, time::Duration};

use common::{Broker, PostgresServer};
use leasehold_client::{
    fence::{
        checked_outcome, fence_param, migration, quote_ident, rows_outcome, FenceError, GuardedSql,
    },
    AcquireOptions, Client,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout},
};

/// The holder's lease: short, so that a pause outlasts it quickly.
const HOLDER_TTL_MS: u64 = 2_000;

/// How long any one step may take on a loaded machine (the first start of
/// the holder includes its connections).
const STEP: Duration = Duration::from_secs(60);

// The holder's program: the example itself, compiled into this test
// binary too.
#[path = "../clients/rust/examples/fenced_writer.rs"]
#[allow(dead_code)] // its `main` is the example's, not called here
mod fenced_writer;

/// The environment variable that carries holder A's arguments, one a line,
/// to [`holder_a`] in a process of its own.
const HOLDER_ARGS: &str = "LEASEHOLD_GC_PAUSE_HOLDER_ARGS";

/// Not a test of its own: holder A's process. The story tests start this
/// test binary again, running only this (ignored) test, with
/// [`HOLDER_ARGS`] set; it runs `examples/fenced_writer` with those
/// arguments. A process of its own, so that SIGSTOP pauses it and nothing
/// else; the test binary itself, so that no other build is needed (Cargo
/// names only this package's binaries to its tests, and the example is
/// the client's).
#[test]
#[ignore = "holder A's process, started by the other tests of this file"]
fn holder_a() {
    let args = std::env::var(HOLDER_ARGS)
        .unwrap_or_else(|_| panic!("run by the GC-pause tests, with {HOLDER_ARGS} set"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(fenced_writer::run(
            args.lines().map(str::to_owned).collect(),
        ))
        .expect("holder A");
}

/// The lock a `fenced_writer` on `table` takes.
fn lock_of(table: &str) -> String {
    format!("gc-pause/{table}")
}

/// A `fenced_writer` process: holder A of the story. Killed on drop (even
/// while stopped: SIGKILL ends a stopped process).
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    fence: u64,
}

impl Holder {
    /// Starts the holder, and waits until it holds the lock of `table`.
    async fn start(broker: &str, database: &str, table: &str) -> Holder {
        let args = [broker, database, table, &HOLDER_TTL_MS.to_string()].join("\n");
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["holder_a", "--exact", "--ignored", "--nocapture", "--quiet"])
            .env(HOLDER_ARGS, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start fenced_writer");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut holder = Holder {
            child,
            stdin,
            stdout,
            fence: 0,
        };
        // The test harness's own first lines ("running 1 test") come
        // before the program's.
        let mut first = holder.read().await;
        while !first.starts_with("fence ") && !first.starts_with("lost ") {
            first = holder.read().await;
        }
        holder.fence = first
            .strip_prefix("fence ")
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("fenced_writer said `{first}`, not its fence"));
        holder
    }

    async fn send(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to fenced_writer");
        self.stdin.flush().await.expect("flush to fenced_writer");
    }

    /// The holder's next line of output.
    async fn read(&mut self) -> String {
        match tokio::time::timeout(STEP, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => panic!(
                "fenced_writer exited: {:?}",
                self.child.try_wait().ok().flatten()
            ),
            Ok(Err(e)) => panic!("reading fenced_writer: {e}"),
            Err(_) => panic!("fenced_writer said nothing for {STEP:?}"),
        }
    }

    /// Has the holder check its lease for `command`, and returns once it
    /// has decided to go ahead: what follows is the gap between its check
    /// and its write.
    async fn decide(&mut self, command: &str) {
        self.send(command).await;
        assert_eq!(self.read().await, "checked", "`{command}`");
    }

    /// Lets a decided command go ahead; its outcome.
    async fn go(&mut self) -> String {
        self.send("go").await;
        self.read().await
    }

    /// A command checked and done at once.
    async fn run(&mut self, command: &str) -> String {
        self.decide(command).await;
        self.go().await
    }

    fn pid(&self) -> libc::pid_t {
        let id = self.child.id().expect("fenced_writer runs");
        libc::pid_t::try_from(id).expect("a pid fits pid_t")
    }

    /// SIGSTOP, and waits until the kernel shows the process stopped: from
    /// then on it sends no heartbeat.
    async fn pause(&self) {
        let pid = self.pid();
        // SAFETY: kill with our child's pid and a valid signal.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        common::eventually(STEP, "fenced_writer to be stopped", || async move {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .await;
    }

    fn resume(&self) {
        // SAFETY: kill with our child's pid and a valid signal.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGCONT) }, 0);
    }
}

/// A connection to `pg`, its connection task spawned.
async fn connect(pg: &PostgresServer) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(connection);
    db
}

/// Holder B: takes `lock` as soon as it is free, waiting for it (the
/// event that says A's lease has ended), with a TTL that outlasts the test.
async fn successor(broker: &Broker, lock: &str) -> (Client, leasehold_client::Lease) {
    let client = Client::connect(broker.url()).await.expect("connect B");
    let lease = client
        .acquire(
            lock,
            AcquireOptions::new()
                .ttl(Duration::from_secs(60))
                .wait(Duration::from_secs(120))
                .holder("B"),
        )
        .await
        .expect("B takes the lock once A's lease has expired");
    (client, lease)
}

/// B's write: the guard's statement run by another driver's hands (here
/// tokio-postgres called directly), as sqlx or diesel users do.
async fn write_as_b(
    db: &tokio_postgres::Client,
    id: &str,
    body: &str,
    fence: u64,
) -> Result<(), FenceError> {
    let sql = GuardedSql::new("reports", "id").column("body");
    let row = db
        .query_one(&sql.checked_update(), &[&fence_param(fence)?, &id, &body])
        .await
        .expect("the guarded update runs");
    checked_outcome(row.get("written"), row.get("found"), fence)
}

async fn row(db: &tokio_postgres::Client, id: &str) -> (String, i64) {
    let row = db
        .query_one(r#"SELECT body, fence FROM "reports" WHERE id = $1"#, &[&id])
        .await
        .expect("the row");
    (row.get(0), row.get(1))
}

/// The story of the article, on a real PostgreSQL: A writes, is paused
/// past its TTL between its lease check and its next write, B takes over
/// (higher fence) and writes; A's late write is refused as stale, and the
/// row keeps B's value and fence.
#[tokio::test]
async fn a_paused_holders_late_write_is_refused_by_the_row() {
    story("write").await;
}

/// The same story with the late write an upsert (the guard for rows that
/// may not exist yet).
#[tokio::test]
async fn a_paused_holders_late_upsert_is_refused_by_the_row() {
    story("upsert").await;
}

/// The GC-pause story, A's late write being `late` (`write` or `upsert`).
async fn story(late: &str) {
    let pg = PostgresServer::start();
    let broker = Broker::start("memory").await;
    let db = connect(&pg).await;
    db.batch_execute("CREATE TABLE reports (id text PRIMARY KEY, body text NOT NULL)")
        .await
        .unwrap();
    db.batch_execute(&migration("reports")).await.unwrap();

    let mut a = Holder::start(&broker.url(), &pg.url(), "reports").await;
    // The row does not exist yet: A's upsert creates it, its update would
    // have found no row.
    assert_eq!(
        a.run("write nightly a-0").await,
        format!("no-row {}", a.fence)
    );
    assert_eq!(a.run("upsert nightly a-1").await, "written");
    assert_eq!(a.run("write nightly a-2").await, "written", "equal fence");
    assert_eq!(
        row(&db, "nightly").await,
        ("a-2".into(), fence_param(a.fence).unwrap())
    );

    // A has checked its lease and decided to write: the pause falls here.
    a.decide(&format!("{late} nightly a-late")).await;
    a.pause().await;
    let (b_client, b_lease) = successor(&broker, &lock_of("reports")).await;
    let b = b_lease.fence();
    assert!(b > a.fence, "B's fence {b} is above A's {}", a.fence);
    write_as_b(&db, "nightly", "b-1", b).await.unwrap();
    write_as_b(&db, "nightly", "b-2", b).await.unwrap();

    a.resume();
    assert_eq!(a.go().await, format!("stale {}", a.fence));
    assert_eq!(
        row(&db, "nightly").await,
        ("b-2".into(), fence_param(b).unwrap())
    );
    // A's next check tells it its lease is gone: a careful holder stops
    // there.
    a.send("write nightly a-3").await;
    let next = a.read().await;
    assert!(next.starts_with("lost "), "A's next check: {next}");
    assert_eq!(
        row(&db, "nightly").await,
        ("b-2".into(), fence_param(b).unwrap())
    );

    // B's statement tells a missing row from a stale fence.
    assert!(matches!(
        write_as_b(&db, "weekly", "b", b).await,
        Err(FenceError::NoRow { .. })
    ));
    b_lease.release().await.unwrap();
    drop(b_client);
}

/// A side effect that stores nothing (a message sent): the holder asks the
/// broker (CheckFence) right before it. After the pause, the check says
/// stale and nothing is sent; the successor's own check passes.
#[tokio::test]
async fn a_paused_holders_late_message_is_stopped_by_check_fence() {
    let broker = Broker::start("memory").await;
    let mut a = Holder::start(&broker.url(), "-", "outbox").await;
    assert_eq!(a.run("send invoice 1 paid").await, "sent invoice 1 paid");

    a.decide("send invoice 1 paid again").await;
    a.pause().await;
    let (b_client, b_lease) = successor(&broker, &lock_of("outbox")).await;
    assert!(b_lease.fence() > a.fence);
    a.resume();
    assert_eq!(a.go().await, format!("stale {}", a.fence));

    let (current, fence) = b_client
        .check_fence(&lock_of("outbox"), b_lease.fence())
        .await
        .unwrap();
    assert!(current, "B's fence is the current one");
    assert_eq!(fence, b_lease.fence());
    b_lease.release().await.unwrap();
}

/// The guard's statements on a real PostgreSQL, whatever the table's name:
/// identifiers quoted (a name with spaces, capitals, quotes and a
/// semicolon stays a name), the migration idempotent, the upsert creating
/// and then guarding a row, equal fences allowed, a lower one refused, in
/// a schema of its own, inside a transaction too.
#[tokio::test]
async fn the_guarded_statements_hold_on_postgresql_for_any_table_name() {
    let pg = PostgresServer::start();
    let mut db = connect(&pg).await;
    let table = r#"Fenced "rows"; DROP TABLE x; --"#;
    let sql = GuardedSql::new(table, "Key")
        .in_schema("app")
        .column("Value");
    db.batch_execute(&format!(
        r#"CREATE SCHEMA app; CREATE TABLE x (); CREATE TABLE app.{} ("Key" bigint PRIMARY KEY, "Value" text)"#,
        quote_ident(table)
    ))
    .await
    .unwrap();
    // Twice: IF NOT EXISTS.
    db.batch_execute(&sql.migration()).await.unwrap();
    db.batch_execute(&sql.migration()).await.unwrap();

    let upsert = |fence: u64, value: &'static str| {
        let sql = sql.upsert();
        let db = &db;
        async move {
            let rows = db
                .execute(&sql, &[&fence_param(fence).unwrap(), &7_i64, &value])
                .await
                .unwrap();
            rows_outcome(rows, fence)
        }
    };
    upsert(10, "a").await.unwrap();
    upsert(10, "a again").await.unwrap();
    upsert(20, "b").await.unwrap();
    assert!(upsert(10, "late").await.unwrap_err().is_stale());

    let update = sql.update();
    let rows = db
        .execute(&update, &[&fence_param(15).unwrap(), &7_i64, &"late"])
        .await
        .unwrap();
    assert!(rows_outcome(rows, 15).unwrap_err().is_stale());

    // In a transaction: the guard is one statement of it.
    let tx = db.transaction().await.unwrap();
    let row = tx
        .query_one(
            &sql.checked_update(),
            &[&fence_param(30).unwrap(), &7_i64, &"c"],
        )
        .await
        .unwrap();
    checked_outcome(row.get(0), row.get(1), 30).unwrap();
    tx.commit().await.unwrap();

    let stored = db
        .query_one(
            &format!(r#"SELECT "Value", fence FROM app.{}"#, quote_ident(table)),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stored.get::<_, String>(0), "c");
    assert_eq!(stored.get::<_, i64>(1), 30);
    // The table the name mentions is untouched.
    let x: i64 = db
        .query_one("SELECT count(*) FROM x", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(x, 0);
}
