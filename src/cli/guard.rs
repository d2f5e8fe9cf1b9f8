//! The guardian of `leasehold run`'s command: a small process between `run`
//! and the command that ends every descendant of the command when `run`
//! ends, however it ends.
//!
//! Why a process of its own: when `run` is SIGKILLed, OOM-killed or dies of
//! SIGHUP, no code of `run` runs any more, and `PR_SET_PDEATHSIG` reaches only
//! the direct child, not what a shell script forks. Someone still alive has
//! to notice and clean up. The guardian holds the read end of a pipe whose
//! only write end `run` holds; the kernel closes that end however `run` dies,
//! and the guardian then SIGKILLs every descendant at once.
//!
//! Why a subreaper (`PR_SET_CHILD_SUBREAPER`) and not a process group or a
//! cgroup: a descendant that daemonizes (double fork, `setsid`, a process
//! group of its own) leaves any process group, but an orphan is reparented
//! to the nearest subreaper, so it stays in the guardian's tree, where the
//! guardian finds it (from /proc) and kills it. A cgroup would also hold
//! everything, but needs a writable, delegated cgroup v2, which a container
//! or a cron job rarely has; a subreaper needs no privilege.
//!
//! Not covered: what the command asks *another* service to start
//! (`systemd-run`, `at`, `docker run`, `ssh`): those are not its descendants.
//!
//! The guardian is the `leasehold` binary itself (a hidden subcommand, run
//! before any async runtime exists), single-threaded, with no allocation in
//! its signal handler. It exits as soon as the command and everything it
//! left behind are gone, with the command's exit code.
//!
//! Its protocol with `run`:
//! - SIGTERM (or SIGINT) to the guardian: SIGTERM to every descendant;
//! - the pipe closed (`run` exited, died, or wants the command dead now):
//!   SIGKILL to every descendant, repeated until none is left;
//! - the command exits: SIGTERM to what it left behind, SIGKILL after
//!   `--grace`, then exit with the command's code.

use std::{
    collections::HashMap,
    os::unix::process::CommandExt,
    process::ExitCode,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::{Duration, Instant},
};

use leasehold_server::duration::parse_duration;

/// Arguments of the hidden `leasehold __guard` (started by `run` only).
#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    /// The read end of the pipe whose write end `run` holds.
    #[arg(long)]
    watch_fd: libc::c_int,
    /// How long what the command left behind gets after SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    grace: Duration,
    /// The command, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The write end of the self-pipe that wakes the main loop from `poll`.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// Its read end.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
/// SIGTERM or SIGINT received, not yet passed on.
static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    if signal == libc::SIGTERM || signal == libc::SIGINT {
        TERM.store(true, Ordering::SeqCst);
    }
    // SAFETY: write() is async-signal-safe; the buffer is a local. The pipe
    // is non-blocking and drained at every wakeup, so the write succeeds
    // and leaves errno alone for the code this handler interrupted.
    unsafe {
        libc::write(WAKE.load(Ordering::SeqCst), [0u8].as_ptr().cast(), 1);
    }
}

/// Runs the command under guard; returns its exit code (126/127 if it could
/// not be run, as a shell does).
pub fn guard(args: GuardArgs) -> ExitCode {
    match start(&args) {
        Ok(command) => ExitCode::from(watch(&args, command)),
        Err(code) => ExitCode::from(code),
    }
}

/// Becomes a subreaper, installs the signal handlers and starts the command;
/// returns its pid.
fn start(args: &GuardArgs) -> Result<libc::pid_t, u8> {
    let setup = |what: &str, failed: bool| {
        if failed {
            eprintln!(
                "leasehold: cannot guard the command ({what}: {})",
                std::io::Error::last_os_error()
            );
            Err(126)
        } else {
            Ok(())
        }
    };
    // SAFETY: fcntl, prctl, pipe2 and sigaction are called with valid
    // arguments; the handler only touches atomics and write().
    unsafe {
        // The command must not hold the pipe open (its death would then go
        // unnoticed while it lives).
        setup(
            "--watch-fd",
            libc::fcntl(args.watch_fd, libc::F_SETFD, libc::FD_CLOEXEC) == -1,
        )?;
        #[cfg(target_os = "linux")]
        setup(
            "PR_SET_CHILD_SUBREAPER",
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) == -1,
        )?;
        let mut wake = [0; 2];
        setup(
            "pipe",
            libc::pipe2(wake.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) == -1,
        )?;
        WAKE.store(wake[1], Ordering::SeqCst);
        WAKE_READ.store(wake[0], Ordering::SeqCst);
        // Handlers, not SIG_IGN: the command starts with the default
        // dispositions (exec resets handlers, but keeps "ignored"). SIGHUP
        // is caught and does nothing: the guardian's process group is
        // orphaned once `run` is gone, and must not die of that.
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        for signal in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            setup(
                "sigaction",
                libc::sigaction(signal, &action, std::ptr::null_mut()) == -1,
            )?;
        }
    }

    let guardian = std::process::id() as libc::pid_t;
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl and getppid are async-signal-safe. Should the guardian
    // itself be SIGKILLed, the command dies with it (the guardian has one
    // thread, so "the thread that forked" is the guardian's life); if it
    // died before the prctl, the command does not start.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != guardian {
                return Err(std::io::Error::other("the guardian is gone"));
            }
            Ok(())
        });
    }
    match command.spawn() {
        Ok(child) => Ok(child.id() as libc::pid_t),
        Err(e) => {
            eprintln!("leasehold: cannot run {:?}: {e}", args.command[0]);
            Err(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
    }
}

/// Reaps, passes signals on and kills, until no descendant is left; returns
/// the command's exit code.
fn watch(args: &GuardArgs, command: libc::pid_t) -> u8 {
    let mut code = None;
    let mut watched = true; // the pipe from `run` is still open
    let mut killing = false;
    let mut leftovers_until = None;
    loop {
        // Reap the command and any orphan reparented here.
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only to `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == command {
                code = Some(exit_code(status));
            } else if pid == 0 {
                break; // some still run
            } else if pid < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // No child left: nothing of the command runs any more.
                return code.unwrap_or(1);
            }
        }
        if TERM.swap(false, Ordering::SeqCst) {
            signal_descendants(libc::SIGTERM);
        }
        let now = Instant::now();
        if code.is_some() && leftovers_until.is_none() {
            // The command is done; what it started must not outlive it.
            signal_descendants(libc::SIGTERM);
            leftovers_until = Some(now + args.grace);
        }
        if leftovers_until.is_some_and(|until| now >= until) {
            killing = true;
        }
        if killing {
            signal_descendants(libc::SIGKILL);
        }

        let timeout = if killing {
            10 // ms: until the killed are reaped (and to catch late forks)
        } else if let Some(until) = leftovers_until {
            // (At most a second at a time: the loop recomputes it.)
            until.saturating_duration_since(now).as_millis().min(1_000) as libc::c_int + 1
        } else {
            -1
        };
        let mut fds = [
            libc::pollfd {
                fd: WAKE_READ.load(Ordering::SeqCst),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if watched { args.watch_fd } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfds; a negative fd is
        // ignored by poll.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        let mut buf = [0u8; 64];
        // SAFETY: reads into a local buffer of the given size; the
        // self-pipe is non-blocking.
        while unsafe { libc::read(fds[0].fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        if watched && fds[1].revents != 0 {
            // SAFETY: as above. Readable means EOF (`run` never writes) or
            // an error: either way `run` is gone or wants everything dead.
            let n = unsafe { libc::read(args.watch_fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                watched = false;
                killing = true;
            }
        }
    }
}

/// Sends `signal` to every descendant of this process. Read from /proc
/// (every process's parent), so it finds orphans reparented here and needs
/// no kernel option; a process forked meanwhile is caught by the next call
/// (SIGKILL is repeated until none is left).
fn signal_descendants(signal: libc::c_int) {
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(ppid) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().nth(1)?.parse().ok()
            })
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
    }
    let mut next = vec![std::process::id() as libc::pid_t];
    while let Some(parent) = next.pop() {
        for &child in children.get(&parent).into_iter().flatten() {
            // SAFETY: kill() has no memory-safety preconditions.
            unsafe { libc::kill(child, signal) };
            next.push(child);
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
fn exit_code(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else if libc::WIFSIGNALED(status) {
        128u8.saturating_add(libc::WTERMSIG(status) as u8)
    } else {
        1
    }
}
