//! The `leasehold` binary as users run it: `run` around real child processes
//! (exit codes, environment, kill -9, lease loss, SIGTERM), `hold` paused by
//! SIGSTOP, the acquire/describe/release commands, every documented exit
//! code, and `health`.

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

const EXIT_USAGE: i32 = 64;
const EXIT_UNAVAILABLE: i32 = 69;
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
        libc::kill(pid.cast_signed(), signal);
    }
}

fn alive(pid: u32) -> bool {
    // Signal 0 checks existence; a zombie child of ours is reaped by `wait`.
    // SAFETY: as above.
    unsafe { libc::kill(pid.cast_signed(), 0) == 0 }
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

/// The value of `key` in `acquire`'s `export KEY='value'` lines.
fn assignment(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("export {key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .trim_matches('\'')
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

/// `leasehold ARGS` against `broker`: its exit code and what it said on
/// standard error.
async fn outcome(broker: &Broker, args: &[&str]) -> (i32, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(20),
        leasehold(broker).args(args).output(),
    )
    .await
    .expect("the command ended in time")
    .unwrap();
    (
        output.status.code().expect("an exit code"),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A request the broker refuses as invalid, and a bad flag, exit 64 (a
/// command to fix), not 69 (an outage to wait out): a retry loop that
/// retries on 69 would otherwise retry a typo forever. The message says
/// what to fix, ranges in words.
#[tokio::test]
async fn misconfiguration_exits_64() {
    let broker = Broker::start("memory").await;
    // Refused by the broker (INVALID_ARGUMENT).
    for args in [
        &["acquire", "--lock", "no spaces"][..],
        &["run", "--lock", "no spaces", "--", "echo", "ran"],
        &["hold", "--lock", "bad{tag}"],
    ] {
        let (code, stderr) = outcome(&broker, args).await;
        assert_eq!(code, EXIT_USAGE, "{args:?}: {stderr}");
        assert!(stderr.contains("allowed are"), "{args:?}: {stderr}");
    }
    // A TTL outside the broker's bounds, said as people write them, with
    // the flag to change.
    let (code, stderr) = outcome(&broker, &["acquire", "--lock", "ok", "--ttl", "100ms"]).await;
    assert_eq!(code, EXIT_USAGE, "{stderr}");
    assert_eq!(
        stderr.trim(),
        "leasehold: --ttl: a TTL of 100 ms is below this broker's minimum of 500 ms (--ttl-min)"
    );
    // Refused before any call: bad flags, a broker URL without a scheme.
    for args in [
        &["acquire", "--lock", "ok", "--ttl", "10"][..],
        &["acquire", "--lock", "ok", "--busy-exit-code", "256"],
        &["acquire", "--no-such-flag"],
        &["acquire", "--lock", "ok", "--broker", "127.0.0.1:7420"],
    ] {
        let (code, stderr) = outcome(&broker, args).await;
        assert_eq!(code, EXIT_USAGE, "{args:?}: {stderr}");
    }
    let client = Client::connect(broker.url()).await.unwrap();
    assert!(!held(&client, "ok").await, "nothing was acquired");
}

/// An unreachable broker exits 69, for every lock command.
#[tokio::test]
async fn an_unreachable_broker_exits_69() {
    let broker = Broker::start("memory").await;
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    for args in [
        &["acquire", "--lock", "a"][..],
        &["hold", "--lock", "a"],
        &["run", "--lock", "a", "--", "echo", "ran"],
        &["describe", "--lock", "a"],
    ] {
        let mut command = leasehold(&broker);
        command.env("LEASEHOLD_BROKER", &dead).args(args);
        let output = command.output().await.unwrap();
        assert_eq!(
            output.status.code(),
            Some(EXIT_UNAVAILABLE),
            "{args:?}: {output:?}"
        );
        assert!(output.stdout.is_empty(), "{args:?}: the command ran");
    }
}

/// "Someone else holds the lock" exits 75 unless --busy-exit-code says
/// otherwise (0: a cron job that skips is not a failed job); the command
/// does not run either way.
#[tokio::test]
async fn the_busy_exit_code_is_the_callers_choice() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let _lease = client.acquire("busy", AcquireOptions::new()).await.unwrap();
    let cases: [(&[&str], i32); 6] = [
        (&["acquire", "--lock", "busy"], EXIT_LOCK_BUSY),
        (&["acquire", "--lock", "busy", "--busy-exit-code", "0"], 0),
        (&["hold", "--lock", "busy", "--busy-exit-code", "3"], 3),
        (
            &["run", "--lock", "busy", "--", "echo", "ran"],
            EXIT_LOCK_BUSY,
        ),
        (
            &[
                "run",
                "--lock",
                "busy",
                "--busy-exit-code",
                "0",
                "--",
                "echo",
                "ran",
            ],
            0,
        ),
        (
            &[
                "elect",
                "--election",
                "busy",
                "--value",
                "b",
                "--wait",
                "0",
                "--busy-exit-code",
                "0",
            ],
            0,
        ),
    ];
    for (args, want) in cases {
        let output = leasehold(&broker).args(args).output().await.unwrap();
        assert_eq!(output.status.code(), Some(want), "{args:?}: {output:?}");
        assert!(output.stdout.is_empty(), "{args:?}: {output:?}");
    }
}

/// `--wait 0` (no unit: zero is zero in any unit) tries once.
#[tokio::test]
async fn wait_zero_needs_no_unit() {
    let broker = Broker::start("memory").await;
    let (code, stderr) = outcome(&broker, &["acquire", "--lock", "zero", "--wait", "0"]).await;
    assert_eq!(code, 0, "{stderr}");
    let started = Instant::now();
    let (code, stderr) = outcome(&broker, &["acquire", "--lock", "zero", "--wait", "0"]).await;
    assert_eq!(code, EXIT_LOCK_BUSY, "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5), "it waited");
}

/// `eval "$(leasehold acquire ...)"` sets and exports the variables: the
/// shell sees the fence, and `release` (a child of the shell) finds the
/// owner token in its environment.
#[tokio::test]
async fn acquire_output_is_evaluable_and_exported() {
    let broker = Broker::start("memory").await;
    let output = Command::new("sh")
        .args([
            "-c",
            r#"eval "$("$LH" acquire --lock 'evaluated' --ttl 30s)" || exit 9
               echo "$LEASEHOLD_LOCK $LEASEHOLD_FENCE"
               "$LH" describe --lock "$LEASEHOLD_LOCK" || exit 8
               "$LH" release --lock "$LEASEHOLD_LOCK""#,
        ])
        .env("LH", env!("CARGO_BIN_EXE_leasehold"))
        .env("LEASEHOLD_BROKER", broker.url())
        .env_remove("LEASEHOLD_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut lines = stdout.lines();
    let (lock, fence) = lines.next().unwrap().split_once(' ').unwrap();
    assert_eq!(lock, "evaluated");
    assert!(fence.parse::<u64>().unwrap() > 0, "{stdout}");
    assert!(
        lines.next().unwrap().contains(&format!("fence={fence}")),
        "{stdout}"
    );
    let client = Client::connect(broker.url()).await.unwrap();
    assert!(!held(&client, "evaluated").await, "release found the token");
}

/// `--help` of the top level and of `run` lists every exit code.
#[tokio::test]
async fn help_lists_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(args)
            .output()
            .await
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let help = String::from_utf8(output.stdout).unwrap();
        for code in ["64", "69", "75", "76", "77", "126", "127"] {
            assert!(
                help.lines().any(|l| l.trim_start().starts_with(code)),
                "{args:?}: no exit code {code} in\n{help}"
            );
        }
        assert!(help.contains("--busy-exit-code"), "{help}");
    }
}

/// `health` exits 0 while the broker answers, even NOT_SERVING (its store
/// unreachable: a sidecar's readiness and a Docker HEALTHCHECK must not
/// follow a Redis blip); `--store` requires SERVING; no broker: 1.
#[tokio::test]
async fn health_checks_the_broker_process_and_optionally_the_store() {
    let mut redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let health = |extra: &'static [&'static str]| {
        let broker = &broker;
        async move {
            let output = leasehold(broker)
                .arg("health")
                .args(extra)
                .output()
                .await
                .unwrap();
            (
                output.status.code().unwrap(),
                String::from_utf8(output.stdout).unwrap(),
            )
        }
    };
    let (code, out) = health(&["--store"]).await;
    assert_eq!(
        (code, out.trim_end()),
        (0, &*format!("broker={} status=SERVING", broker.url()))
    );

    redis.stop();
    common::eventually(Duration::from_secs(15), "health --store fails", || async {
        health(&["--store"]).await == (1, format!("broker={} status=NOT_SERVING\n", broker.url()))
    })
    .await;
    let (code, out) = health(&[]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("status=NOT_SERVING"), "{out}");

    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let output = leasehold(&broker)
        .args(["health", "--broker", &dead])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("status=UNREACHABLE"),
        "{output:?}"
    );
}

/// Now on the guardian's deadline clock (CLOCK_BOOTTIME), as `run` reads it.
fn boot_clock() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only `now`, a live timespec of ours.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    assert_eq!(read, 0);
    Duration::new(
        u64::try_from(now.tv_sec).expect("the boot clock is not negative"),
        u32::try_from(now.tv_nsec).expect("tv_nsec is in 0..10^9"),
    )
}

/// A command that prints the boot clock (/proc/uptime: CLOCK_BOOTTIME, in
/// hundredths, rounded down) every 50 ms and ignores SIGTERM, so that only
/// a SIGKILL ends it.
const TICKER: &str =
    "trap '' TERM; while :; do read -r up _ < /proc/uptime; echo \"$up\"; sleep 0.05; done";

/// `leasehold __guard` around `command`, as `run` starts it, with the first
/// deadline `deadline` on the boot clock; returns it, its ticks, and the
/// write end of the pipe it watches (standing for `run`, which says nothing
/// unless the test writes).
fn guardian(
    deadline: Duration,
    command: &str,
) -> (Child, Lines<BufReader<ChildStdout>>, std::os::fd::OwnedFd) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    let watch = read.as_raw_fd();
    let mut guard = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    guard
        .arg("__guard")
        .arg(format!("--watch-fd={watch}"))
        .arg("--grace=200ms")
        .arg(format!("--deadline-ns={}", deadline.as_nanos()))
        .args(["--", "bash", "-c", command])
        .kill_on_drop(true);
    // SAFETY: fcntl is async-signal-safe; only the child inherits the read
    // end.
    unsafe {
        guard.pre_exec(move || {
            if libc::fcntl(watch, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (child, ticks) = spawn(guard);
    drop(read);
    (child, ticks, write)
}

fn write_all(pipe: &std::os::fd::OwnedFd, bytes: &[u8]) {
    use std::os::fd::AsRawFd;
    // SAFETY: writes from a live buffer of the given length.
    let n = unsafe { libc::write(pipe.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(
        n,
        isize::try_from(bytes.len()).expect("a slice is at most isize::MAX bytes")
    );
}

/// The ticks (boot clock, seconds) printed until the guardian's stdout ends.
async fn all_ticks(ticks: &mut Lines<BufReader<ChildStdout>>) -> Vec<f64> {
    let mut all = Vec::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(20), ticks.next_line()).await
    {
        all.push(line.trim().parse().expect("a tick"));
    }
    all
}

/// When `run` says nothing more (stopped, traced, starved), the guardian
/// ends the command by itself at the last deadline it was given, even if
/// the command ignores SIGTERM: no tick after the deadline, ticks up to
/// its SIGTERM (so not killed early), and exit code 76 (lease lost).
#[tokio::test]
async fn the_guardian_kills_at_the_deadline_when_run_is_silent() {
    let deadline = boot_clock() + Duration::from_millis(1_500);
    let (mut guard, mut ticks, _run) = guardian(deadline, TICKER);
    let ticks = all_ticks(&mut ticks).await;
    assert_eq!(
        exit_code(&mut guard, Duration::from_secs(10)).await,
        EXIT_LEASE_LOST
    );
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let deadline = deadline.as_secs_f64();
    assert!(
        last < deadline,
        "a tick at {last} s, after the deadline at {deadline:.3} s"
    );
    // Rounded down to 10 ms, ticking every 50 ms: it ran up to 200 ms (the
    // grace) before the deadline, allowing a loaded machine 200 ms more.
    assert!(
        last >= deadline - 0.4,
        "the last tick at {last} s, long before the deadline at {deadline:.3} s (first at {first})"
    );
}

/// A deadline message may arrive in pieces and extends the guardian's
/// deadline; anything that is not a deadline message makes it kill the
/// command at once (SIGKILL: exit 137), long before the deadline.
#[tokio::test]
async fn the_guardian_takes_torn_deadlines_and_kills_on_garbage() {
    let start = boot_clock();
    let (mut guard, mut ticks, run) = guardian(start + Duration::from_millis(1_000), TICKER);
    // A deadline 30 s away, in two writes.
    let later = format!("{}\n", (start + Duration::from_secs(30)).as_nanos());
    write_all(&run, b"deadline ");
    tokio::time::sleep(Duration::from_millis(100)).await;
    write_all(&run, later.as_bytes());
    // Past the first deadline, the command still ticks.
    let first_deadline = (start + Duration::from_millis(1_000)).as_secs_f64();
    loop {
        let tick: f64 = next_line(&mut ticks).await.trim().parse().unwrap();
        if tick > first_deadline + 0.5 {
            break;
        }
    }
    let garbage = boot_clock();
    write_all(&run, b"deadline 12x\n");
    let after = all_ticks(&mut ticks).await;
    assert_eq!(exit_code(&mut guard, Duration::from_secs(10)).await, 137);
    let killed_by = garbage.as_secs_f64() + 2.0;
    assert!(
        after.iter().all(|t| *t < killed_by),
        "ticks {after:?} more than 2 s after the garbage at {:.3} s",
        garbage.as_secs_f64()
    );
}

/// A wait longer than the broker's --max-wait (1 s here) is a chain of
/// calls that keep their place in line: `--wait forever` waits until the
/// lock is free, however long, and a finite `--wait` gives up when it runs
/// out, not at the broker's maximum.
#[tokio::test]
async fn waits_run_past_the_brokers_max_wait() {
    let max_wait = Duration::from_secs(1);
    let broker = Broker::start_with("memory", |c| c.limits.max_wait = max_wait).await;
    let holder = Client::connect(broker.url()).await.unwrap();
    let held = holder
        .acquire(
            "queue/long",
            AcquireOptions::new().ttl(Duration::from_secs(30)),
        )
        .await
        .unwrap();

    // A finite wait of 3 s: three calls, then "busy" (75), not 64 at the
    // first call's refusal.
    let started = Instant::now();
    let (code, stderr) = outcome(
        &broker,
        &["acquire", "--lock", "queue/long", "--wait", "3s"],
    )
    .await;
    assert_eq!(code, EXIT_LOCK_BUSY, "{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "gave up after {:?}",
        started.elapsed()
    );

    // Forever: still waiting well past the broker's maximum, then granted
    // as soon as the holder lets go.
    let mut waiter = leasehold(&broker)
        .args(["acquire", "--lock", "queue/long", "--wait", "forever"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::eventually(Duration::from_secs(10), "the waiter in line", || async {
        holder.describe("queue/long").await.unwrap().waiters == 1
    })
    .await;
    // The behaviour under test is time itself: three of the broker's
    // maximum waits go by.
    tokio::time::sleep(3 * max_wait).await;
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the waiter gave up at the broker's --max-wait"
    );
    assert_eq!(holder.describe("queue/long").await.unwrap().waiters, 1);
    held.release().await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), waiter.wait_with_output())
        .await
        .expect("granted once released")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("LEASEHOLD_FENCE="), "{stdout}");
}

/// The proto's field names a person never typed (`wait_timeout_ms`,
/// `owner_token`...): every field name with an underscore.
fn proto_field_names() -> Vec<String> {
    let proto = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/proto/leasehold/v1/leasehold.proto"
    ))
    .unwrap();
    let mut names: Vec<String> = proto
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter_map(|l| {
            // `type name = N;`, `repeated type name = N;`, `map<k, v> name = N;`
            let (left, _) = l.split_once(" = ")?;
            let name = left.rsplit(' ').next()?;
            (name.contains('_') && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                .then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(names.contains(&"wait_timeout_ms".to_owned()), "{names:?}");
    names
}

/// Every refusal the CLI can meet, as its user reads it: in the user's
/// words (its flags), with no proto field name, no transport prefix and no
/// doubled text.
#[tokio::test]
async fn refusals_speak_the_users_words() {
    let broker = Broker::start_with("memory", |c| c.limits.max_holder_len = 8).await;
    let holder = Client::connect(broker.url()).await.unwrap();
    let _held = holder
        .acquire("taken", AcquireOptions::new().holder("pod-a"))
        .await
        .unwrap();
    let fields = proto_field_names();
    let cases: [(&[&str], i32, &str); 11] = [
        (
            &["elect", "--election", "a b", "--value", "v"],
            EXIT_USAGE,
            "--election: the lock name contains",
        ),
        (
            &["acquire", "--lock", "ok", "--ttl", "100ms"],
            EXIT_USAGE,
            "--ttl: a TTL of 100 ms",
        ),
        (
            &["acquire", "--lock", "ok", "--ttl", "2h"],
            EXIT_USAGE,
            "--ttl: a TTL of 2 h",
        ),
        (
            &["acquire", "--lock", "a b"],
            EXIT_USAGE,
            "--lock: the lock name contains",
        ),
        (
            &["acquire", "--lock", "ok", "--holder", "123456789"],
            EXIT_USAGE,
            "--holder: the holder label",
        ),
        (
            &["acquire", "--lock", "ok", "--lock-delay", "2h"],
            EXIT_USAGE,
            "--lock-delay: a lock-delay of 2 h",
        ),
        (
            &["acquire", "--lock", "ok", "--limit", "100000"],
            EXIT_USAGE,
            "--limit: a semaphore of 100000",
        ),
        (
            &["acquire", "--lock", "taken"],
            EXIT_LOCK_BUSY,
            "held by 'pod-a'",
        ),
        (
            &[
                "release",
                "--lock",
                "ok",
                "--token",
                "0123456789abcdef0123456789abcdef",
            ],
            EXIT_LEASE_LOST,
            "the lease was lost",
        ),
        (
            &["release", "--lock", "ok", "--token", "xyz"],
            EXIT_USAGE,
            "--token: the owner token",
        ),
        (&["revoke", "--lock", "taken"], 77, "--enable-revoke"),
    ];
    for (args, code, says) in cases {
        let (got, stderr) = outcome(&broker, args).await;
        assert_eq!(got, code, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        for field in &fields {
            assert!(
                !stderr.contains(field.as_str()),
                "{args:?} names {field}: {stderr}"
            );
        }
        for transport in [
            "Client specified",
            "status:",
            "tcp connect error: tcp connect error",
        ] {
            assert!(!stderr.contains(transport), "{args:?}: {stderr}");
        }
    }
    // A broker nobody listens on.
    let (code, stderr) = {
        let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .env("LEASEHOLD_BROKER", "http://127.0.0.1:1")
            .args(["acquire", "--lock", "ok"])
            .output()
            .await
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert_eq!(code, EXIT_UNAVAILABLE, "{stderr}");
    assert!(
        !stderr.contains("tcp connect error: tcp connect error"),
        "{stderr}"
    );
}

/// `-o json` on describe, check-fence and observe: one JSON object per line,
/// with the same facts as the text output, for jq and scripts.
#[tokio::test]
async fn describe_check_fence_and_observe_print_json() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client
        .acquire("json/lock", AcquireOptions::new().holder("pod-a"))
        .await
        .unwrap();
    let stdout = |output: std::process::Output| -> serde_json::Value {
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        serde_json::from_str(&text).unwrap()
    };

    let described = stdout(
        leasehold(&broker)
            .args(["describe", "--lock", "json/lock", "-o", "json"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(described["lock"], "json/lock");
    assert_eq!(described["held"], true);
    assert_eq!(described["holder"], "pod-a");
    assert_eq!(described["fence"], lease.fence());
    assert!(
        described["remaining_ms"].as_u64().unwrap() > 0,
        "{described}"
    );
    assert_eq!(described["ttl_ms"], 10_000);

    let checked = stdout(
        leasehold(&broker)
            .args(["check-fence", "--lock", "json/lock", "-o", "json"])
            .args(["--fence", &lease.fence().to_string()])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(checked["current"], true);
    assert_eq!(checked["current_fence"], lease.fence());

    let mut observe = leasehold(&broker);
    observe.args(["observe", "--election", "json/election", "-o", "json"]);
    let (_observer, mut lines) = spawn(observe);
    let first: serde_json::Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(first["leader"], false, "{first}");
    let leading = client
        .campaign("json/election", "10.0.0.7:8080", AcquireOptions::new())
        .await
        .unwrap();
    let second: serde_json::Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(second["leader"], true, "{second}");
    assert_eq!(second["value"], "10.0.0.7:8080");
    assert_eq!(second["term"], leading.fence());
}

/// `hold` prints the broker's TTL advice once, on standard error, when its
/// heartbeats are slow for its TTL (here a 2 s lease through a proxy that
/// comes to hold each direction 300 ms: a round trip of 600 ms or more,
/// which a 2 s lease survives, barely); and
/// `--ttl auto` lets the broker choose (the floor, on a fast connection).
#[tokio::test]
async fn hold_prints_the_ttl_advice_and_takes_ttl_auto() {
    let broker = Broker::start_with("memory", |c| {
        c.limits.ttl_auto_floor = Duration::from_secs(3);
    })
    .await;
    let mut command = leasehold(&broker);
    command.args(["hold", "--lock", "auto", "--ttl", "auto"]);
    let (mut auto, mut out) = spawn(command);
    // Nothing measured yet on this broker: the floor.
    let granted = next_line(&mut out).await;
    assert!(granted.ends_with(" ttl_ms=3000"), "the floor: {granted}");
    let (_, usage) = outcome(&broker, &["hold", "--lock", "x", "--ttl", "soon"]).await;
    assert!(usage.contains("or auto"), "{usage}");
    let proxy = common::proxy::Proxy::start(broker.addr).await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env("LEASEHOLD_BROKER", format!("http://{}", proxy.addr()))
        .args(["hold", "--lock", "slow", "--ttl", "2s"])
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (mut slow, mut out) = spawn(command);
    assert!(next_line(&mut out).await.starts_with("granted lock=slow"));
    // Slow from now on (a grant through it would start late, and the
    // client's deadline, counted from the sending, would be short).
    proxy.set_latency(Duration::from_millis(300));
    let mut errors = BufReader::new(slow.stderr.take().unwrap()).lines();
    let advice = tokio::time::timeout(Duration::from_secs(30), errors.next_line())
        .await
        .expect("advice within a few heartbeats")
        .unwrap();
    let advice = match advice {
        Some(line) => line,
        None => {
            let status = slow.wait().await.unwrap();
            let mut rest = Vec::new();
            while let Ok(Some(line)) = out.next_line().await {
                rest.push(line);
            }
            panic!("hold ended ({status}) without advice; its output: {rest:?}");
        }
    };
    assert!(
        advice.starts_with("leasehold: TTL advice from the broker: ")
            && advice.contains("the shortest 2 s")
            && advice.contains("or --ttl auto)"),
        "{advice}"
    );

    // Only one advice line while the advice holds: the next line on
    // standard error comes at the end (none here), not per heartbeat.
    signal(slow.id().unwrap(), libc::SIGTERM);
    assert_eq!(exit_code(&mut slow, Duration::from_secs(20)).await, 0);
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = Vec::new();
        while let Some(line) = errors.next_line().await.unwrap() {
            rest.push(line);
        }
        rest
    })
    .await
    .unwrap();
    assert!(rest.iter().all(|l| !l.contains("TTL advice")), "{rest:?}");
    signal(auto.id().unwrap(), libc::SIGTERM);
    assert_eq!(exit_code(&mut auto, Duration::from_secs(20)).await, 0);
}
