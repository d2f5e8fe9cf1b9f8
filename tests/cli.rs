//! The `leasehold` binary as users run it: `run` around real child processes
//! (exit codes, environment, kill -9, lease loss, SIGTERM), `hold` paused by
//! SIGSTOP, and the acquire/describe/release commands.

use leasehold_testkit as common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::{Broker, RedisServer};
use leasehold_client::{AcquireOptions, Client};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};

const EXIT_LOCK_BUSY: i32 = 75;
const EXIT_LEASE_LOST: i32 = 76;

fn leasehold(broker: &Broker) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env("LEASEHOLD_BROKER", broker.url())
        .kill_on_drop(true);
    command
}

fn spawn(mut command: Command) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn leasehold");
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdout)
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .expect("read")
        .expect("a line, not EOF")
}

async fn exit_code(child: &mut Child, within: Duration) -> i32 {
    tokio::time::timeout(within, child.wait())
        .await
        .expect("the process exited in time")
        .expect("wait")
        .code()
        .expect("an exit code")
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

fn alive(pid: u32) -> bool {
    // Signal 0 checks existence; a zombie child of ours is reaped by `wait`.
    // SAFETY: as above.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

async fn held(client: &Client, name: &str) -> bool {
    client.describe(name).await.unwrap().held
}

/// `run` hands the child the lock name and fence, returns the child's exit
/// code, and releases the lock.
#[tokio::test]
async fn run_passes_the_fence_and_the_exit_code_and_releases() {
    let broker = Broker::start("memory").await;
    let mut command = leasehold(&broker);
    command.args([
        "run",
        "--lock",
        "cron/report",
        "--ttl",
        "5s",
        "--",
        "sh",
        "-c",
        "echo \"$LEASEHOLD_LOCK $LEASEHOLD_FENCE\"; exit 7",
    ]);
    let (mut child, mut out) = spawn(command);
    let line = next_line(&mut out).await;
    let (lock, fence) = line.split_once(' ').expect("two words");
    assert_eq!(lock, "cron/report");
    assert!(fence.parse::<u64>().expect("a number") > 0);
    assert_eq!(exit_code(&mut child, Duration::from_secs(10)).await, 7);
    let client = Client::connect(broker.url()).await.unwrap();
    assert!(
        !held(&client, "cron/report").await,
        "released when the command ended"
    );
}

/// A held lock: `run` exits with 75 without running the command.
#[tokio::test]
async fn run_on_a_busy_lock_exits_75_without_running() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let _lease = client.acquire("busy", AcquireOptions::new()).await.unwrap();
    let mut command = leasehold(&broker);
    command.args(["run", "--lock", "busy", "--", "echo", "ran"]);
    let (mut child, mut out) = spawn(command);
    assert_eq!(
        exit_code(&mut child, Duration::from_secs(10)).await,
        EXIT_LOCK_BUSY
    );
    assert!(out.next_line().await.unwrap().is_none(), "the command ran");
}

/// `kill -9` of a `run` process: its child dies with it, and the lock is free
/// at the TTL; a waiter gets it with a higher fence.
#[tokio::test]
async fn a_killed_holder_frees_the_lock_at_its_ttl() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut command = leasehold(&broker);
    command.args([
        "run",
        "--lock",
        "victim",
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        "echo \"$$ $LEASEHOLD_FENCE\"; exec sleep 60",
    ]);
    let (mut holder, mut out) = spawn(command);
    let line = next_line(&mut out).await;
    let (pid, fence) = line.split_once(' ').unwrap();
    let (grandchild, fence): (u32, u64) = (pid.parse().unwrap(), fence.parse().unwrap());

    holder.start_kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    holder.wait().await.unwrap();
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client
        .acquire(
            "victim",
            AcquireOptions::new().wait(Duration::from_secs(10)),
        )
        .await
        .expect("the lock comes free");
    let freed_after = killed.elapsed();
    assert!(
        freed_after < Duration::from_millis(2_500),
        "free {freed_after:?} after the kill; TTL 1 s"
    );
    assert!(lease.fence() > fence);
    common::eventually(
        Duration::from_secs(5),
        "the child to die with its holder",
        || async move { !alive(grandchild) },
    )
    .await;
}

/// The store loses the lease: `run` stops its child and exits 76.
#[tokio::test]
async fn run_stops_its_child_when_the_lease_is_lost() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut command = leasehold(&broker);
    command.args([
        "run",
        "--lock",
        "flushed",
        "--ttl",
        "3s",
        "--",
        "sh",
        "-c",
        "echo $$; exec sleep 60",
    ]);
    let (mut holder, mut out) = spawn(command);
    let grandchild: u32 = next_line(&mut out).await.parse().unwrap();
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    assert_eq!(
        exit_code(&mut holder, Duration::from_secs(10)).await,
        EXIT_LEASE_LOST
    );
    assert!(!alive(grandchild), "the child outlived the lease");
}

/// SIGTERM to `run`: the child is asked to stop, its exit code is returned
/// and the lock released.
#[tokio::test]
async fn run_forwards_sigterm_and_cleans_up() {
    let broker = Broker::start("memory").await;
    let mut command = leasehold(&broker);
    command.args([
        "run",
        "--lock",
        "graceful",
        "--ttl",
        "5s",
        "--",
        "sh",
        "-c",
        "trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done",
    ]);
    let (mut holder, mut out) = spawn(command);
    assert_eq!(next_line(&mut out).await, "ready");
    signal(holder.id().unwrap(), libc::SIGTERM);
    assert_eq!(exit_code(&mut holder, Duration::from_secs(10)).await, 3);
    let client = Client::connect(broker.url()).await.unwrap();
    assert!(!held(&client, "graceful").await, "released after SIGTERM");
}

/// A holder paused (SIGSTOP) past its TTL reports the loss as the first thing
/// it does when it resumes; meanwhile someone else got the lock.
#[tokio::test]
async fn a_paused_holder_knows_its_lease_is_lost_when_it_resumes() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut command = leasehold(&broker);
    command.args(["hold", "--lock", "paused", "--ttl", "1s"]);
    let (mut holder, mut out) = spawn(command);
    let granted = next_line(&mut out).await;
    assert!(
        granted.starts_with("granted lock=paused fence="),
        "{granted}"
    );
    assert!(next_line(&mut out).await.starts_with("holding"));

    let pid = holder.id().unwrap();
    signal(pid, libc::SIGSTOP);
    let client = Client::connect(broker.url()).await.unwrap();
    let next = client
        .acquire(
            "paused",
            AcquireOptions::new().wait(Duration::from_secs(10)),
        )
        .await
        .expect("the paused holder's lease expires");
    signal(pid, libc::SIGCONT);

    // It was stopped right after a status line (they come every 333 ms), so
    // the next line is the first thing it did after resuming: the loss.
    let line = next_line(&mut out).await;
    assert!(line.starts_with("lost lock=paused"), "{line}");
    assert_eq!(
        exit_code(&mut holder, Duration::from_secs(10)).await,
        EXIT_LEASE_LOST
    );
    assert!(held(&client, "paused").await);
    next.release().await.unwrap();
}

/// The value of `key` in `acquire`'s `KEY=value` lines.
fn assignment(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_owned()
}

/// acquire prints shell assignments; describe shows the holder; release with
/// the token frees it, and a second release says the lease is gone.
#[tokio::test]
async fn acquire_describe_release_round_trip() {
    let broker = Broker::start("memory").await;
    let output = leasehold(&broker)
        .args([
            "acquire",
            "--lock",
            "manual",
            "--ttl",
            "30s",
            "--holder",
            "ops-laptop",
        ])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let value = |key: &str| assignment(&text, key);
    let token = value("LEASEHOLD_TOKEN");
    assert_eq!(value("LEASEHOLD_LOCK"), "manual");

    let described = leasehold(&broker)
        .args(["describe", "--lock", "manual"])
        .output()
        .await
        .unwrap();
    let described = String::from_utf8(described.stdout).unwrap();
    assert!(
        described.contains("held=true") && described.contains("\"ops-laptop\""),
        "{described}"
    );
    assert!(described.contains(&format!("fence={}", value("LEASEHOLD_FENCE"))));
    assert!(
        !described.contains(&token),
        "describe leaked the owner token"
    );

    let release = |token: String| {
        let mut c = leasehold(&broker);
        c.args(["release", "--lock", "manual"])
            .env("LEASEHOLD_TOKEN", token);
        c
    };
    assert!(release(token.clone()).status().await.unwrap().success());
    // Again (a retry whose first try did the work): still a success.
    assert!(release(token).status().await.unwrap().success());
    // A token that never held it is told so.
    assert_eq!(
        release("0".repeat(32)).status().await.unwrap().code(),
        Some(EXIT_LEASE_LOST)
    );
}

/// Every command takes every `--broker` URL: with the first unreachable,
/// acquire, describe, check-fence and release go to the next (they used to
/// try the first only and exit 69).
#[tokio::test]
async fn commands_move_past_an_unreachable_broker() {
    let broker = Broker::start("memory").await;
    // A loopback port nobody listens on (bound, then closed).
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let urls = format!("{dead},{}", broker.url());
    let run = |args: &[&str]| {
        let mut c = leasehold(&broker);
        c.env("LEASEHOLD_BROKER", &urls).args(args);
        c
    };
    let output = run(&["acquire", "--lock", "failover", "--ttl", "30s"])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let value = |key: &str| assignment(&text, key);
    let described = run(&["describe", "--lock", "failover"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&described.stdout).contains("held=true"));
    let fence = value("LEASEHOLD_FENCE");
    let checked = run(&["check-fence", "--lock", "failover", "--fence", &fence])
        .status()
        .await
        .unwrap();
    assert!(checked.success());
    let mut release = run(&["release", "--lock", "failover"]);
    release.env("LEASEHOLD_TOKEN", value("LEASEHOLD_TOKEN"));
    assert!(release.status().await.unwrap().success());
    assert!(!held(&Client::connect(broker.url()).await.unwrap(), "failover").await);
}
