//! `leasehold run`: hold a lock around a child command, the cron-job and
//! sidecar entry point. The child runs only while the lease is held; if the
//! lease is lost, or renewals stop getting through, the child is stopped
//! (SIGTERM, then SIGKILL after a grace period) before the lease could have
//! expired on the broker.

use std::{process::ExitCode, time::Duration};

use tokio::{
    process::{Child, Command},
    time::{sleep, sleep_until, Instant},
};

use super::{fail, BrokerArgs, LockArgs, EXIT_LEASE_LOST};
use crate::{client::ClientError, config::parse_duration};

/// Arguments of `leasehold run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(flatten)]
    lock: LockArgs,
    /// Time between SIGTERM and SIGKILL when the command must stop
    /// (default: a fifth of the TTL). The SIGTERM is sent this long before
    /// the lease's local deadline, so the command is dead before the broker
    /// could expire the lease.
    #[arg(long, value_parser = parse_duration)]
    kill_grace: Option<Duration>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the command under the lease; returns its exit code, or
/// `EXIT_LOCK_BUSY` if the lock was not obtained, or `EXIT_LEASE_LOST` if the
/// lease was lost and the command stopped.
pub async fn run(args: RunArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let lease = match client.acquire(&args.lock.lock, args.lock.options()).await {
        Ok(lease) => lease,
        Err(e) => return fail(&e),
    };
    let grace = args
        .kill_grace
        .unwrap_or(lease.ttl() / 5)
        .clamp(Duration::from_millis(50), lease.ttl() / 2);

    // Listen before the child starts, so an early SIGTERM is forwarded.
    let stop = crate::shutdown::signal();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LEASEHOLD_LOCK", lease.name())
        .env("LEASEHOLD_FENCE", lease.fence().to_string())
        // Its own process group, so that stopping it reaches its children.
        .process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    // The child is killed if this process dies (even by SIGKILL), so it can
    // never outlive the lease's keeper. Linux ties this to the thread that
    // forked, a tokio worker, which lives as long as this process does.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("leasehold: cannot run {:?}: {e}", args.command[0]);
            let _ = lease.release().await;
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };

    tokio::pin!(stop);
    loop {
        let stop_at = lease
            .deadline()
            .checked_sub(grace)
            .unwrap_or_else(Instant::now);
        tokio::select! {
            status = child.wait() => {
                let code = match status {
                    Ok(status) => exit_code(status),
                    Err(e) => {
                        eprintln!("leasehold: lost track of the command: {e}");
                        1
                    }
                };
                return match lease.release().await {
                    Ok(()) => ExitCode::from(code),
                    Err(ClientError::Lost(reason)) => {
                        eprintln!("leasehold: the lease on {} was lost ({reason}) as the command ended", args.lock.lock);
                        ExitCode::from(EXIT_LEASE_LOST)
                    }
                    Err(e) => {
                        // The lease expires at its TTL anyway.
                        eprintln!("leasehold: could not release the lease: {e}");
                        ExitCode::from(code)
                    }
                };
            }
            reason = lease.lost() => {
                eprintln!("leasehold: the lease on {} was lost ({reason}); stopping the command", args.lock.lock);
                stop_child(&mut child, grace).await;
                return ExitCode::from(EXIT_LEASE_LOST);
            }
            () = sleep_until(stop_at) => {
                if lease.deadline().checked_sub(grace).is_some_and(|at| at > Instant::now()) {
                    continue; // renewed meanwhile
                }
                eprintln!(
                    "leasehold: no renewal of the lease on {} confirmed in time; stopping the command before the lease can expire",
                    args.lock.lock
                );
                stop_child(&mut child, grace).await;
                let _ = lease.release().await;
                return ExitCode::from(EXIT_LEASE_LOST);
            }
            () = &mut stop => {
                eprintln!("leasehold: stopping the command");
                let code = stop_child(&mut child, grace).await;
                let _ = lease.release().await;
                return ExitCode::from(code);
            }
        }
    }
}

/// SIGTERM to the child's process group, SIGKILL after `grace`; returns the
/// child's exit code.
async fn stop_child(child: &mut Child, grace: Duration) -> u8 {
    signal_group(child, libc::SIGTERM);
    tokio::select! {
        status = child.wait() => return status.map_or(1, exit_code),
        () = sleep(grace) => {}
    }
    signal_group(child, libc::SIGKILL);
    child.wait().await.map_or(1, exit_code)
}

fn signal_group(child: &Child, signal: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill() has no memory-safety preconditions. The negative pid
        // names the child's process group (created by `process_group(0)`).
        unsafe {
            libc::kill(-(pid as libc::pid_t), signal);
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        _ => 1,
    }
}
