//! The checker with real processes: holders are `leasehold run` processes
//! whose child writes its fence to a fenced resource (a small TCP service in
//! this test, which keeps the highest fence it accepted and refuses lower
//! ones), over two broker processes on one Redis. Meanwhile random holders
//! are killed with SIGKILL (the command dies with `run`: its guardian kills
//! it) or paused with SIGSTOP past their TTL and resumed with SIGCONT (`run`
//! and its guardian's process group, as a GC pause or a frozen VM would).
//! Then `descendants_die_with_run`: whatever way `run` ends, what its
//! command forked (even into a session of its own) stops before the lease's
//! deadline.
//!
//! Checked: a write is refused only if it comes from a holder that was
//! paused (its lease expired meanwhile and the lock moved on: the fence
//! catches the late write); any other refusal means two holders overlapped.
//! `LEASEHOLD_CHECK_SECS` sets the duration (default 6 s; for
//! `descendants_die_with_run`, one pass of its 10 rounds).

use leasehold_testkit as common;

use std::{
    collections::HashSet,
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{BrokerProcess, RedisServer};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpListener,
    process::Command,
};

#[derive(Default)]
struct Resource {
    highest: u64,
    accepted: u64,
    /// Refused writes: (fence, pid the write was tagged with).
    refused: Vec<(u64, u32)>,
    /// Every write, as received: (fence, pid it was tagged with, when).
    writes: Vec<(u64, u32, Instant)>,
    /// Connections closed by the writer: (pid of its last write, when).
    closed: Vec<(u32, Instant)>,
}

/// Serves the fenced resource: each line "FENCE PID" is a write, answered
/// "ok" or "refused".
async fn serve_resource(listener: TcpListener, resource: Arc<Mutex<Resource>>) {
    while let Ok((socket, _)) = listener.accept().await {
        let resource = Arc::clone(&resource);
        tokio::spawn(async move {
            let (read, mut write) = socket.into_split();
            let mut lines = BufReader::new(read).lines();
            let mut writer = None;
            while let Ok(Some(line)) = lines.next_line().await {
                let mut parts = line.split_whitespace();
                let (Some(Ok(fence)), Some(Ok(pid))) = (
                    parts.next().map(str::parse::<u64>),
                    parts.next().map(str::parse::<u32>),
                ) else {
                    break;
                };
                writer = Some(pid);
                let accepted = {
                    let mut r = resource.lock().unwrap();
                    r.writes.push((fence, pid, Instant::now()));
                    if fence >= r.highest {
                        r.highest = fence;
                        r.accepted += 1;
                        true
                    } else {
                        r.refused.push((fence, pid));
                        false
                    }
                };
                if write
                    .write_all(if accepted { b"ok\n" } else { b"refused\n" })
                    .await
                    .is_err()
                {
                    break;
                }
            }
            // The writer exited (or closed its socket): when it could no
            // longer write.
            if let Some(pid) = writer {
                resource.lock().unwrap().closed.push((pid, Instant::now()));
            }
        });
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe {
        libc::kill(pid.cast_signed(), signal);
    }
}

/// `signal` to the process group led by `leader`.
fn signal_group(leader: u32, signal: libc::c_int) {
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe {
        libc::kill(-leader.cast_signed(), signal);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_processes_killed_and_paused() {
    let secs: u64 = std::env::var("LEASEHOLD_CHECK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let redis = RedisServer::start();
    let brokers = [
        BrokerProcess::start(&redis.url()).await,
        BrokerProcess::start(&redis.url()).await,
    ];
    let broker_urls = format!("{},{}", brokers[0].url(), brokers[1].url());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let resource = Arc::new(Mutex::new(Resource::default()));
    tokio::spawn(serve_resource(listener, Arc::clone(&resource)));

    // The child: three writes of its fence, tagged with its parent's pid
    // (the guardian that the `leasehold run` holding the lease started).
    let child = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; for i in 1 2 3; do echo \"$LEASEHOLD_FENCE $PPID\" >&3; read -r answer <&3; sleep 0.05; done"
    );
    let running: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let paused: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let runs = Arc::new(Mutex::new((0u64, 0u64))); // (runs, runs that ended with 76: lease lost)
    let end = Instant::now() + Duration::from_secs(secs);

    let mut workers = Vec::new();
    for _ in 0..8 {
        let (child, broker_urls, running, runs) = (
            child.clone(),
            broker_urls.clone(),
            Arc::clone(&running),
            Arc::clone(&runs),
        );
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let mut run = Command::new(env!("CARGO_BIN_EXE_leasehold"))
                    .args([
                        "run",
                        "--lock",
                        "checked",
                        "--ttl",
                        "1s",
                        "--wait",
                        "3s",
                        "--kill-grace",
                        "200ms",
                        "--",
                    ])
                    .args(["bash", "-c", &child])
                    .env("LEASEHOLD_BROKER", &broker_urls)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap();
                let pid = run.id().unwrap();
                running.lock().unwrap().insert(pid);
                let status = run.wait().await.unwrap();
                running.lock().unwrap().remove(&pid);
                let mut runs = runs.lock().unwrap();
                runs.0 += 1;
                if status.code() == Some(76) {
                    runs.1 += 1;
                }
            }
        }));
    }

    // Faults: every 400 ms, SIGKILL or SIGSTOP (for 1.5 s, past the TTL) a
    // random running holder.
    let (mut kills, mut pauses) = (0, 0);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let victim = running.lock().unwrap().iter().next().copied();
        let Some(pid) = victim else { continue };
        let mut coin = [0u8; 1];
        getrandom::fill(&mut coin).unwrap();
        if coin[0] % 2 == 0 {
            signal(pid, libc::SIGKILL);
            kills += 1;
        } else {
            // The whole holder: `run` and its guardian's process group
            // (the guardian, the command and the command's children).
            let guardians: Vec<u32> = child_pids(pid);
            paused.lock().unwrap().extend(&guardians);
            signal(pid, libc::SIGSTOP);
            for g in &guardians {
                signal_group(*g, libc::SIGSTOP);
            }
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            for g in &guardians {
                signal_group(*g, libc::SIGCONT);
            }
            signal(pid, libc::SIGCONT);
            pauses += 1;
        }
    }
    for worker in workers {
        let _ = tokio::time::timeout(Duration::from_secs(15), worker).await;
    }

    let resource = resource.lock().unwrap();
    let paused = paused.lock().unwrap();
    let (runs, lost) = *runs.lock().unwrap();
    let unexplained: Vec<_> = resource
        .refused
        .iter()
        .filter(|(_, pid)| !paused.contains(pid))
        .collect();
    println!(
        "scenario=holder_processes runs={runs} runs_lost_lease={lost} kills={kills} pauses={pauses} \
         writes_accepted={} writes_refused={} violations={}",
        resource.accepted,
        resource.refused.len(),
        unexplained.len()
    );
    assert!(
        unexplained.is_empty(),
        "writes refused from holders that were never paused: {unexplained:?}"
    );
    assert!(
        resource.accepted >= 10,
        "only {} writes: not exercised",
        resource.accepted
    );
    drop(brokers);
}

/// How a round of `descendants_die_with_run` ends its `run`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    /// SIGKILL of `run` (what PR_SET_PDEATHSIG alone covers only for the
    /// direct child).
    Kill,
    /// SIGHUP of `run` (its terminal is gone; it does not catch SIGHUP).
    HangUp,
    /// SIGTERM to `run`: passed on to the whole tree (exit 143, the
    /// command's).
    Terminate,
    /// The lease is lost (Redis flushed): `run` stops the tree (exit 76).
    LeaseLost,
    /// The command exits (code 7) and leaves its background job behind.
    CommandExits,
}

/// However `run` ends, no descendant of its command keeps running: the
/// command is a shell that forks a grandchild (a plain background job, or
/// one that left with `setsid`) writing its fence every 50 ms; `run` is
/// SIGKILLed, hung up, sent SIGTERM, loses its lease, or its command exits.
/// Every write from the grandchild must be received before the lease's
/// deadline (the lease is valid for the TTL from when `run` sent its
/// acquire, so after `run` was spawned: the bound used here is the spawn
/// plus the TTL, which is earlier), and its connection must close then too
/// (the grandchild is dead); where `run` stops the tree itself, before `run`
/// exits, with the exit code it always had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descendants_die_with_run() {
    const TTL: Duration = Duration::from_secs(2);
    let redis = RedisServer::start();
    let broker = BrokerProcess::start(&redis.url()).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let resource = Arc::new(Mutex::new(Resource::default()));
    tokio::spawn(serve_resource(listener, Arc::clone(&resource)));
    // Should a grandchild survive (the failure this test is for), it is
    // killed when the test ends rather than left writing.
    let survivors = Survivors::default();

    let writer = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; while :; do echo \"$LEASEHOLD_FENCE $BASHPID\" >&3; read -r answer <&3; sleep 0.05; done"
    );
    let forks = format!("({writer}) & wait");
    let setsid = format!("setsid bash -c '{writer}' & wait");
    let leaves = format!("({writer}) & sleep 0.3; exit 7");
    let rounds = [
        (Ending::Kill, &forks),
        (Ending::Kill, &forks),
        (Ending::Kill, &forks),
        (Ending::Kill, &forks),
        (Ending::Kill, &forks),
        (Ending::Kill, &setsid),
        (Ending::Kill, &setsid),
        (Ending::HangUp, &forks),
        (Ending::HangUp, &setsid),
        (Ending::Terminate, &setsid),
        (Ending::LeaseLost, &setsid),
        (Ending::CommandExits, &leaves),
    ];
    // Once through the rounds, or round after round for
    // LEASEHOLD_CHECK_SECS.
    let until = Instant::now()
        + std::env::var("LEASEHOLD_CHECK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(Duration::ZERO, Duration::from_secs);
    // From SIGKILL or SIGHUP of `run` to the grandchild's end.
    let mut died_after = Vec::new();
    let mut late_writes = 0;
    let mut ran = Vec::new();
    for (round, (ending, command)) in rounds.iter().cycle().enumerate() {
        if round >= rounds.len() && Instant::now() >= until {
            break;
        }
        ran.push(*ending);
        let seen = resource.lock().unwrap().writes.len();
        let spawned = Instant::now();
        let deadline = spawned + TTL;
        let mut command_line = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command_line
            .args(["run", "--lock", &format!("tree-{round}"), "--ttl", "2s"])
            .args(["--kill-grace", "200ms", "--", "bash", "-c", command])
            .env("LEASEHOLD_BROKER", broker.url())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // SIGHUP as a terminal's hang-up delivers it: with its default
        // action, whatever the test runs under (`nohup` leaves it ignored,
        // and an ignored disposition is inherited, so the hang-up round
        // would wait for a `run` that never hears it).
        // SAFETY: signal(2) is async-signal-safe, the one call between fork
        // and exec.
        unsafe {
            command_line.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut run = command_line.spawn().unwrap();

        // The grandchild is at work: three writes received.
        let mut grandchild = None;
        common::eventually(Duration::from_secs(10), "the grandchild's writes", || {
            let writes = resource.lock().unwrap().writes[seen..].to_vec();
            grandchild = writes.first().map(|w| w.1);
            async move { writes.len() >= 3 }
        })
        .await;
        let grandchild = grandchild.unwrap();
        survivors.0.lock().unwrap().push(grandchild);

        let ended = Instant::now();
        match ending {
            Ending::Kill => signal(run.id().unwrap(), libc::SIGKILL),
            Ending::HangUp => signal(run.id().unwrap(), libc::SIGHUP),
            Ending::Terminate => signal(run.id().unwrap(), libc::SIGTERM),
            Ending::LeaseLost => {
                let mut conn = redis.connection().await;
                let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
            }
            Ending::CommandExits => {}
        }
        let status = tokio::time::timeout(Duration::from_secs(10), run.wait())
            .await
            .unwrap_or_else(|_| panic!("round {round} ({ending:?}): run did not exit"))
            .unwrap();
        // Where `run` stops the tree itself, nothing of it outlives `run`:
        // the guardian reaps every descendant before it exits.
        let outlived = !matches!(ending, Ending::Kill | Ending::HangUp) && running(grandchild);
        let expected = match ending {
            Ending::Kill | Ending::HangUp => None, // killed by the signal
            Ending::Terminate => Some(143),        // the shell's, killed by SIGTERM
            Ending::LeaseLost => Some(76),
            Ending::CommandExits => Some(7),
        };
        assert_eq!(
            status.code(),
            expected,
            "round {round} ({ending:?}): run's exit code"
        );

        // Wait for the grandchild's connection to close, at most until a
        // second past the deadline (long enough to see late writes).
        let closed = loop {
            let closed = resource
                .lock()
                .unwrap()
                .closed
                .iter()
                .find(|(pid, _)| *pid == grandchild)
                .map(|c| c.1);
            if closed.is_some() || Instant::now() > deadline + Duration::from_secs(1) {
                break closed;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let late: Vec<Duration> = resource.lock().unwrap().writes[seen..]
            .iter()
            .filter(|w| w.1 == grandchild && w.2 >= deadline)
            .map(|w| w.2 - deadline)
            .collect();
        late_writes += late.len();
        assert!(
            late.is_empty(),
            "round {round} ({ending:?}, `{command}`): {} writes from grandchild {grandchild} after the lease's deadline (the first {:?} after it)",
            late.len(),
            late[0]
        );
        let closed = closed.unwrap_or_else(|| {
            panic!("round {round} ({ending:?}, `{command}`): grandchild {grandchild} still running past the lease's deadline")
        });
        assert!(
            closed < deadline,
            "round {round} ({ending:?}): grandchild {grandchild} ended {:?} after the lease's deadline",
            closed - deadline
        );
        assert!(
            !outlived,
            "round {round} ({ending:?}): grandchild {grandchild} outlived `run`"
        );
        if matches!(ending, Ending::Kill | Ending::HangUp) {
            died_after.push(closed.saturating_duration_since(ended));
        }
    }

    died_after.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "scenario=process_tree runs={} killed={} hung_up={} terminated={} lease_lost={} command_exited={} \
         late_writes={late_writes} tree_dead_after_kill_or_hup_ms min={:.1} median={:.1} max={:.1}",
        ran.len(),
        ran.iter().filter(|e| **e == Ending::Kill).count(),
        ran.iter().filter(|e| **e == Ending::HangUp).count(),
        ran.iter().filter(|e| **e == Ending::Terminate).count(),
        ran.iter().filter(|e| **e == Ending::LeaseLost).count(),
        ran.iter().filter(|e| **e == Ending::CommandExits).count(),
        ms(died_after[0]),
        ms(died_after[died_after.len() / 2]),
        ms(died_after[died_after.len() - 1]),
    );
}

/// What a round of `stopped_run_cannot_outlive_its_lease` does to `run`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pause {
    /// SIGSTOP of `run` only (as a debugger, SIGTTOU or a starved CPU
    /// would leave it): its guardian must kill the tree at the deadline.
    Stop,
    /// SIGTSTP of `run` (Ctrl-Z): `run` does not stop and keeps renewing.
    Suspend,
}

/// Whatever stops `run` itself, its command's tree does not outlive the
/// lease: with a second `run` waiting for the lock, `run` is sent SIGSTOP
/// (its guardian kills the tree at the lease's deadline, before the second
/// is granted; resumed, `run` exits 76 and leaves nothing behind) or
/// SIGTSTP (`run` holds on and renews: its tree writes on past twice the
/// TTL, the second waits, and gets the lock once `run` is stopped with
/// SIGTERM). In both, no write from the first tree follows the second's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_run_cannot_outlive_its_lease() {
    const TTL: Duration = Duration::from_secs(1);
    let redis = RedisServer::start();
    let broker = BrokerProcess::start(&redis.url()).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let resource = Arc::new(Mutex::new(Resource::default()));
    tokio::spawn(serve_resource(listener, Arc::clone(&resource)));
    let survivors = Survivors::default();

    let writer = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; while :; do echo \"$LEASEHOLD_FENCE $BASHPID\" >&3; read -r answer <&3; sleep 0.05; done"
    );
    let forks = format!("({writer}) & wait");
    let setsid = format!("setsid bash -c '{writer}' & wait");
    // The second holder: one write, which marks when it got the lock.
    let once = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; echo \"$LEASEHOLD_FENCE $BASHPID\" >&3; read -r answer <&3"
    );
    let rounds = [
        (Pause::Stop, &forks),
        (Pause::Stop, &setsid),
        (Pause::Suspend, &forks),
        (Pause::Stop, &forks),
        (Pause::Suspend, &setsid),
        (Pause::Stop, &setsid),
    ];
    let run = |lock: &str, wait: &str, command: &str| {
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["run", "--lock", lock, "--ttl", "1s", "--wait", wait])
            .args(["--kill-grace", "200ms", "--", "bash", "-c", command])
            .env("LEASEHOLD_BROKER", broker.url())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let mut late_writes = 0;
    // Stop rounds: from the stop to the tree's end, and from its end to the
    // second holder's grant.
    let (mut dead_after_stop, mut granted_after_death) = (Vec::new(), Vec::new());
    for (round, (pause, command)) in rounds.iter().enumerate() {
        let lock = format!("stopped-{round}");
        let seen = resource.lock().unwrap().writes.len();
        let mut first = run(&lock, "0s", command);
        let mut grandchild = None;
        common::eventually(Duration::from_secs(10), "the grandchild's writes", || {
            let writes = resource.lock().unwrap().writes[seen..].to_vec();
            grandchild = writes.first().map(|w| (w.0, w.1));
            async move { writes.len() >= 3 }
        })
        .await;
        let (fence, grandchild) = grandchild.unwrap();
        survivors.0.lock().unwrap().push(grandchild);
        let mut second = run(&lock, "30s", &once);
        // The second holder waits on the broker before `run` is paused.
        let client = broker.client().await;
        common::eventually(Duration::from_secs(10), "the second holder waiting", || {
            let mut client = client.clone();
            let lock = lock.clone();
            async move { common::local_waiters(&mut client, &lock).await == 1 }
        })
        .await;

        let paused = Instant::now();
        let first_pid = first.id().unwrap();
        match pause {
            Pause::Stop => signal(first_pid, libc::SIGSTOP),
            Pause::Suspend => signal(first_pid, libc::SIGTSTP),
        }
        if *pause == Pause::Suspend {
            // Renewed: the tree writes on past twice the TTL, and the
            // second still waits.
            common::eventually(Duration::from_secs(10), "writes past twice the TTL", || {
                let past = resource.lock().unwrap().writes[seen..]
                    .iter()
                    .any(|w| w.1 == grandchild && w.2 >= paused + 2 * TTL);
                async move { past }
            })
            .await;
            let after = state(first_pid);
            assert!(
                matches!(after, Some('S' | 'R')),
                "round {round}: run's state after SIGTSTP: {after:?} (T: stopped)"
            );
            assert!(
                !resource.lock().unwrap().writes[seen..]
                    .iter()
                    .any(|w| w.0 > fence),
                "round {round}: the second holder got the lock while the first held on"
            );
            signal(first_pid, libc::SIGTERM);
        }

        // The second holder's write: when it had the lock.
        let mut granted = None;
        common::eventually(Duration::from_secs(15), "the second holder's write", || {
            granted = resource.lock().unwrap().writes[seen..]
                .iter()
                .find(|w| w.0 > fence)
                .map(|w| w.2);
            async move { granted.is_some() }
        })
        .await;
        let granted = granted.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(10), second.wait()).await;
        if *pause == Pause::Stop {
            // A window to see what the first tree does while the lock is
            // someone else's (nothing, or writes every 50 ms): no event
            // marks "it would have written by now".
            tokio::time::sleep_until((granted + Duration::from_millis(500)).into()).await;
            signal(first_pid, libc::SIGCONT);
        }
        let status = tokio::time::timeout(Duration::from_secs(10), first.wait())
            .await
            .unwrap_or_else(|_| panic!("round {round} ({pause:?}): run did not exit"))
            .unwrap();

        let resource = resource.lock().unwrap();
        let mine: Vec<Instant> = resource.writes[seen..]
            .iter()
            .filter(|w| w.1 == grandchild)
            .map(|w| w.2)
            .collect();
        let late = mine.iter().filter(|at| **at >= granted).count();
        late_writes += late;
        let refused = resource
            .refused
            .iter()
            .filter(|r| r.1 == grandchild)
            .count();
        assert!(
            late == 0 && refused == 0,
            "round {round} ({pause:?}, `{command}`): {late} writes from grandchild {grandchild} after the next holder's grant, {refused} refused"
        );
        let closed = resource
            .closed
            .iter()
            .find(|(pid, _)| *pid == grandchild)
            .map(|c| c.1);
        let closed = closed.unwrap_or_else(|| {
            panic!(
                "round {round} ({pause:?}): grandchild {grandchild} still running after run exited"
            )
        });
        assert!(
            closed <= granted,
            "round {round} ({pause:?}): grandchild {grandchild} ended {:?} after the next holder's grant",
            closed - granted
        );
        assert!(
            !running(grandchild),
            "round {round} ({pause:?}): grandchild {grandchild} outlived `run`"
        );
        match pause {
            Pause::Stop => {
                // The last renewal was sent before the stop: its deadline
                // is no later than the stop plus the TTL.
                assert!(
                    closed < paused + TTL,
                    "round {round}: grandchild {grandchild} ended {:?} after the stop plus the TTL",
                    closed - (paused + TTL)
                );
                assert_eq!(
                    status.code(),
                    Some(76),
                    "round {round}: run's exit code after SIGCONT"
                );
                dead_after_stop.push(closed - paused);
                granted_after_death.push(granted - closed);
            }
            Pause::Suspend => {
                assert_eq!(
                    status.code(),
                    Some(143),
                    "round {round}: run's exit code after SIGTERM"
                );
            }
        }
    }

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    dead_after_stop.sort();
    granted_after_death.sort();
    let figures = |d: &[Duration]| {
        format!(
            "min={:.1} median={:.1} max={:.1}",
            ms(d[0]),
            ms(d[d.len() / 2]),
            ms(d[d.len() - 1])
        )
    };
    println!(
        "scenario=stopped_run runs={} stopped={} suspended={} late_writes={late_writes} \
         tree_dead_after_stop_ms {} next_grant_after_tree_dead_ms {}",
        rounds.len(),
        rounds.iter().filter(|r| r.0 == Pause::Stop).count(),
        rounds.iter().filter(|r| r.0 == Pause::Suspend).count(),
        figures(&dead_after_stop),
        figures(&granted_after_death),
    );
}

/// Whether `pid` runs (exists and is not a zombie), from /proc.
fn running(pid: u32) -> bool {
    !matches!(state(pid), Some('Z' | 'X') | None)
}

/// The state of `pid` (`S` sleeping, `R` running, `T` stopped, `Z`...),
/// from /proc; `None` if it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ...": comm may hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Grandchildren to SIGKILL if the test fails (they may have outlived
/// `run`); on success they are dead and their pids must not be touched.
#[derive(Default)]
struct Survivors(Mutex<Vec<u32>>);

impl Drop for Survivors {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for pid in self.0.lock().unwrap().iter() {
                signal(*pid, libc::SIGKILL);
            }
        }
    }
}

/// The direct children of `pid` (from /proc; a child belongs to the thread
/// that forked it), to stop a holder's guardian and command too.
fn child_pids(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
