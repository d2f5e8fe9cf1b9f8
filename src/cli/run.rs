//! `leasehold run`: hold a lock around a child command, the cron-job and
//! sidecar entry point. The child runs only while the lease is held; if the
//! lease is lost, or renewals stop getting through, the child is stopped
//! (SIGTERM, then SIGKILL after a grace period) before the lease could have
//! expired on the broker.
//!
//! "The child" is the command and everything it starts: `run`'s only child
//! is a guardian (`super::guard`), which runs the command and, as a
//! subreaper, keeps even daemonized descendants in its tree. `run` asks it to
//! stop them (SIGTERM to the guardian, then closing the pipe it watches);
//! when `run` dies, however, the kernel closes that pipe and the guardian
//! SIGKILLs them all, which no code in a SIGKILLed `run` could do.
//!
//! `run` also writes each confirmed deadline of the lease on that pipe, as
//! it learns of it. A `run` that is alive but does nothing (stopped by
//! SIGSTOP or SIGTTOU, held by a debugger, starved of CPU) closes no pipe;
//! the guardian then stops the tree by itself on the last deadline it was
//! given: SIGTERM `--kill-grace` before it, SIGKILL 25 ms ahead of it (for
//! a late wake-up on a loaded machine). So no descendant
//! of the command runs past the lease's local deadline, whatever happens to
//! `run`, as long as the guardian runs (see `super::guard` for its limits).
//! A `run` resumed after that reports the lease lost (`EXIT_LEASE_LOST`).
//!
//! SIGTSTP (Ctrl-Z at a terminal) is caught and does not stop `run`: a
//! stopped `run` cannot renew, so the lease would expire and the guardian
//! kill the command, the opposite of a pause. `run` says so and holds on;
//! Ctrl-C stops the command and releases the lock.

use std::{
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::process::ExitStatusExt,
    },
    process::ExitCode,
    time::Duration,
};

use tokio::{
    process::{Child, Command},
    signal::unix::{signal, SignalKind},
    time::{sleep_until, timeout, Instant},
};

use super::{
    fail_busy,
    guard::{deadline_message, on_deadline_clock},
    BrokerArgs, LockArgs, EXIT_LEASE_LOST,
};
use leasehold_client::{ClientError, Lease};
use leasehold_server::duration::parse_duration;

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
    /// could expire the lease. Also what the command leaves running when it
    /// exits gets this long after SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    kill_grace: Option<Duration>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs the command under the lease; returns its exit code, or
/// --busy-exit-code (`EXIT_LOCK_BUSY`) if the lock was not obtained, or
/// `EXIT_LEASE_LOST` if the lease was lost and the command stopped.
pub async fn run(args: RunArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let lease = match client.acquire(&args.lock.lock, args.lock.options()).await {
        Ok(lease) => lease,
        Err(e) => return fail_busy(&e, args.lock.busy.busy_exit_code),
    };
    let grace = args
        .kill_grace
        .unwrap_or(lease.ttl() / 5)
        .clamp(Duration::from_millis(50), lease.ttl() / 2);

    // Listen before the child starts, so an early SIGTERM is forwarded.
    let stop = leasehold_server::shutdown::signal();
    // A handler, not SIG_IGN, so that the guardian and the command start
    // with the default disposition (exec resets handlers, keeps "ignored").
    let mut suspend = match signal(SignalKind::from_raw(libc::SIGTSTP)) {
        Ok(suspend) => Some(suspend),
        Err(e) => {
            eprintln!("leasehold: cannot catch SIGTSTP ({e}); Ctrl-Z would stop leasehold and its lease would expire");
            None
        }
    };
    let mut guardian = match Guardian::spawn(&args.command, &lease, grace) {
        Ok(guardian) => guardian,
        Err(e) => {
            eprintln!("leasehold: cannot start the guardian of the command: {e}");
            let _ = lease.release().await;
            return ExitCode::from(126);
        }
    };

    let mut advice = super::Advice::of(&client);
    // Every move of the deadline, back as well as forward (a `--ttl auto`
    // lease whose TTL shrank), goes to the guardian.
    let mut deadlines = lease.deadline_changes();
    tokio::pin!(stop);
    loop {
        let stop_at = lease
            .deadline()
            .checked_sub(grace)
            .unwrap_or_else(Instant::now);
        tokio::select! {
            () = advice.next() => {}
            status = guardian.process.wait() => {
                let code = match status {
                    Ok(status) => {
                        if status.signal().is_some() {
                            // The guardian itself was killed (its command
                            // died with it): end the rest of its group.
                            guardian.signal_group(libc::SIGKILL);
                        }
                        let code = exit_code(status);
                        if code == EXIT_LEASE_LOST && lease.deadline() <= Instant::now() {
                            // The guardian's own deadline kill (or the
                            // command's 76, just as true: the lease is gone).
                            eprintln!(
                                "leasehold: the lease on {} passed its deadline unrenewed while leasehold did not run; the command was killed",
                                args.lock.lock
                            );
                        }
                        code
                    }
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
                guardian.stop(grace).await;
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
                guardian.stop(grace).await;
                let _ = lease.release().await;
                return ExitCode::from(EXIT_LEASE_LOST);
            }
            Ok(()) = deadlines.changed() => {
                let at = *deadlines.borrow_and_update();
                if at != guardian.told {
                    guardian.tell(at);
                }
            }
            Some(()) = async { suspend.as_mut()?.recv().await } => {
                eprintln!(
                    "leasehold: not stopping on SIGTSTP: a stopped leasehold cannot renew the lease on {}, whose expiry would kill the command; Ctrl-C stops the command and releases the lock",
                    args.lock.lock
                );
            }
            () = &mut stop => {
                eprintln!("leasehold: stopping the command");
                let code = guardian.stop(grace).await;
                let _ = lease.release().await;
                return ExitCode::from(code);
            }
        }
    }
}

/// The guardian (see `super::guard`): `run`'s only child, which runs the
/// command and ends every descendant of it when told to, or when `run` dies.
struct Guardian {
    process: Child,
    /// Its pid, which is also its process group's id.
    pid: libc::pid_t,
    /// The write end of the pipe the guardian watches (non-blocking). Dropping
    /// it (or `run` dying, which closes it too) makes the guardian SIGKILL
    /// every descendant of the command; the deadlines written on it are
    /// those the guardian enforces by itself.
    pipe: Option<OwnedFd>,
    /// The last deadline given to the guardian (or tried: see `tell`).
    told: Instant,
}

impl Guardian {
    /// Starts `leasehold __guard -- COMMAND` in a process group of its own
    /// (the command joins it; Ctrl-C at a terminal reaches `run` only, which
    /// passes it on as SIGTERM).
    fn spawn(command: &[String], lease: &Lease, grace: Duration) -> std::io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
        let (read, write) = unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        // Non-blocking: a stopped guardian must not block `run` (see `tell`).
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let watch_fd = read.as_raw_fd();
        let told = lease.deadline();
        // Linux: this very binary, even if it was replaced or deleted since.
        #[cfg(target_os = "linux")]
        let program = std::path::PathBuf::from("/proc/self/exe");
        #[cfg(not(target_os = "linux"))]
        let program = std::env::current_exe()?;
        let mut guardian = Command::new(program);
        if let Some(arg0) = std::env::args_os().next() {
            guardian.arg0(arg0); // `ps` shows "leasehold __guard ..."
        }
        guardian
            .arg("__guard")
            .arg(format!("--watch-fd={watch_fd}"))
            .arg(format!("--grace={}ms", grace.as_millis()))
            .arg(format!(
                "--deadline-ns={}",
                on_deadline_clock(told.into_std()).as_nanos()
            ))
            .arg("--")
            .args(command)
            .env("LEASEHOLD_LOCK", lease.name())
            .env("LEASEHOLD_FENCE", lease.fence().to_string())
            .process_group(0);
        // SAFETY: fcntl is async-signal-safe and changes only the forked
        // child's descriptor table: the guardian inherits the read end (and
        // not the write end, which stays close-on-exec).
        unsafe {
            guardian.pre_exec(move || {
                if libc::fcntl(watch_fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let process = guardian.spawn()?;
        drop(read);
        Ok(Self {
            pid: process.id().map_or(0, super::pid_t),
            process,
            pipe: Some(write),
            told,
        })
    }

    /// Gives the guardian the lease's new deadline. A message that does not
    /// fit (the guardian is stopped and its pipe full) is dropped: the
    /// guardian then keeps an earlier deadline, which errs on the side of
    /// killing; the next renewal tries again. A guardian that is gone
    /// (EPIPE) is `run`'s main loop's business.
    fn tell(&mut self, deadline: Instant) {
        self.told = deadline;
        let Some(pipe) = &self.pipe else { return };
        let message = deadline_message(on_deadline_clock(deadline.into_std()));
        // SAFETY: writes from a live buffer of the given length to a
        // descriptor we own. Under PIPE_BUF, the write is whole or nothing.
        unsafe {
            libc::write(pipe.as_raw_fd(), message.as_ptr().cast(), message.len());
        }
    }

    /// Stops the command and everything it started: SIGTERM, then SIGKILL
    /// after `grace`; returns the command's exit code.
    async fn stop(&mut self, grace: Duration) -> u8 {
        self.signal(libc::SIGTERM); // passed on to every descendant
        if let Ok(status) = timeout(grace, self.process.wait()).await {
            return status.map_or(1, exit_code);
        }
        // SIGKILL to every descendant; SIGCONT in case the guardian was
        // stopped, so that it can.
        self.pipe = None;
        self.signal(libc::SIGCONT);
        if let Ok(status) = timeout(grace, self.process.wait()).await {
            return status.map_or(1, exit_code);
        }
        // The guardian does not answer: kill its process group, which holds
        // the command (only a descendant that left the group escapes this).
        eprintln!("leasehold: the command's guardian does not answer; killing its process group");
        self.signal_group(libc::SIGKILL);
        self.process.wait().await.map_or(1, exit_code)
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.process.id() {
            // SAFETY: kill() has no memory-safety preconditions; the pid is
            // our unreaped child's.
            unsafe {
                libc::kill(super::pid_t(pid), signal);
            }
        }
    }

    /// `signal` to the guardian's process group, also once the guardian is
    /// gone (a group's id cannot be reused while the group has members).
    fn signal_group(&self, signal: libc::c_int) {
        if self.pid > 0 {
            // SAFETY: kill() has no memory-safety preconditions; the
            // negative pid names the process group.
            unsafe {
                libc::kill(-self.pid, signal);
            }
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        // 0 to 255 on Unix (the low byte the child gave exit()).
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => 128u8.saturating_add(u8::try_from(signal).unwrap_or(u8::MAX)),
        _ => 1,
    }
}
