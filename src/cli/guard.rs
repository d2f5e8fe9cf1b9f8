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
//! - a deadline on the pipe (`deadline NANOS\n`, [`DEADLINE_CLOCK`]; the
//!   first one is `--deadline-ns`): the lease's local deadline, as `run`
//!   computes it from the time each renewal was *sent*. Should it pass with
//!   no later one received, the guardian does by itself what `run` would:
//!   SIGTERM to every descendant `--grace` before it, SIGKILL just ahead of
//!   it ([`KILL_LEAD`], for a late wake-up and the walk of /proc), and
//!   exits with `EXIT_LEASE_LOST`. So a `run` that is stopped (SIGSTOP,
//!   SIGTTOU, a debugger), traced or starved of CPU cannot leave its command
//!   working past the lease. Anything else on the pipe (torn, garbage, too
//!   long) is taken as "kill now";
//! - the command exits: SIGTERM to what it left behind, SIGKILL after
//!   `--grace`, then exit with the command's code.
//!
//! Why CLOCK_BOOTTIME (Linux): the lease's TTL runs on in the store while
//! this machine is suspended, but CLOCK_MONOTONIC (`Instant`, the client's
//! deadline) does not: after a resume the command would run on until a
//! renewal failed. `run` converts each deadline to CLOCK_BOOTTIME when it
//! writes it (read before `Instant::now()`, so never later than the lease's
//! deadline), and the guardian waits on a CLOCK_BOOTTIME timerfd, which
//! fires as the machine resumes. Left: a suspend between a heartbeat's send
//! and its confirmation still counts for the lease (the client timed the
//! send on CLOCK_MONOTONIC), as it did before.
//!
//! Limits: the guardian itself must run. Stopped (SIGSTOP of its pid, a
//! debugger), it enforces nothing: while `run` lives, `run` still stops the
//! tree (SIGCONT to the guardian, then SIGKILL to its process group), but if
//! `run` is stopped or dead too, nothing ends the command. A frozen machine
//! or cgroup (everything stopped at once) is the fence's job
//! (docs/guarantees.md, "Fencing").

use std::{
    collections::HashMap,
    os::unix::process::CommandExt,
    process::ExitCode,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
    time::Duration,
};

use super::EXIT_LEASE_LOST;
use leasehold_server::duration::parse_duration;

/// Arguments of the hidden `leasehold __guard` (started by `run` only).
#[derive(clap::Args, Debug)]
pub struct GuardArgs {
    /// The read end of the pipe whose write end `run` holds.
    #[arg(long)]
    watch_fd: libc::c_int,
    /// How long what the command left behind gets after SIGTERM; also how
    /// long before the deadline the command gets SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    grace: Duration,
    /// The lease's first deadline, in nanoseconds of [`DEADLINE_CLOCK`].
    #[arg(long, value_parser = parse_nanos)]
    deadline_ns: Duration,
    /// The command, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The clock of the deadlines `run` gives the guardian: CLOCK_BOOTTIME
/// where there is one (it counts a suspend, as the store's TTL does; see
/// the module docs), CLOCK_MONOTONIC elsewhere.
#[cfg(target_os = "linux")]
pub(super) const DEADLINE_CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
pub(super) const DEADLINE_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;

/// What starts a deadline message: `deadline NANOS\n`.
const DEADLINE_PREFIX: &[u8] = b"deadline ";
/// A message longer than this (prefix, 20 digits, newline: 30) is garbage.
const MAX_MESSAGE: usize = 64;

/// How long before the deadline the SIGKILL is aimed. A timer wakes a
/// process late on a loaded machine, and the walk of /proc that finds every
/// descendant takes milliseconds more with many processes: aimed at the
/// deadline itself, a command that ignores SIGTERM was seen to run 5 ms past
/// it (a full test run on two cores). The deadline is already the client's
/// conservative one (send time + TTL - margin), so the lease is still live
/// in the store for this long before it.
pub(crate) const KILL_LEAD: Duration = Duration::from_millis(25);

/// Now, on [`DEADLINE_CLOCK`].
pub(super) fn clock_now() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only `now`. It cannot fail: the clock
    // exists on this OS (Linux >= 2.6.39 for CLOCK_BOOTTIME) and the
    // pointer is valid; were it to, the zero left in `now` is a deadline
    // in the past, which kills rather than lets run.
    unsafe { libc::clock_gettime(DEADLINE_CLOCK, &mut now) };
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec.clamp(0, 999_999_999)).unwrap_or(0),
    )
}

/// `deadline` (an `Instant`, CLOCK_MONOTONIC) on [`DEADLINE_CLOCK`], never
/// later than it: the clock is read first, so the time between the two
/// reads comes off the result.
pub(super) fn on_deadline_clock(deadline: std::time::Instant) -> Duration {
    let clock = clock_now();
    clock + deadline.saturating_duration_since(std::time::Instant::now())
}

/// The message that gives the guardian a new deadline (one `write`, well
/// under PIPE_BUF, so it reaches the guardian whole or not at all).
pub(super) fn deadline_message(at: Duration) -> Vec<u8> {
    let mut message = DEADLINE_PREFIX.to_vec();
    message.extend_from_slice(format!("{}\n", at.as_nanos()).as_bytes());
    message
}

/// `--deadline-ns`: a whole number of nanoseconds.
fn parse_nanos(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_nanos)
        .map_err(|_| format!("'{text}' is not a number of nanoseconds"))
}

/// Adds what was read from the pipe to `pending` and takes the complete
/// messages out of it: the last deadline among them, if any; `Err` if
/// anything is not a well-formed deadline message (then the guardian kills:
/// whoever writes that is not the `run` we know).
fn take_deadlines(pending: &mut Vec<u8>, read: &[u8]) -> Result<Option<Duration>, ()> {
    pending.extend_from_slice(read);
    let mut last = None;
    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = pending.drain(..=end).collect();
        let digits = line[..end]
            .strip_prefix(DEADLINE_PREFIX)
            .filter(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
            .ok_or(())?;
        let nanos = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u64>().ok())
            .ok_or(())?;
        last = Some(Duration::from_nanos(nanos));
    }
    if pending.len() > MAX_MESSAGE {
        return Err(());
    }
    Ok(last)
}

/// A one-shot timer on [`DEADLINE_CLOCK`] that poll() can wait on (Linux: a
/// timerfd, which fires as the machine resumes from a suspend that outlasted
/// it; elsewhere none, and poll's own timeout does).
struct Alarm(libc::c_int);

impl Alarm {
    fn new() -> Self {
        #[cfg(target_os = "linux")]
        // SAFETY: timerfd_create has no memory-safety preconditions. On
        // failure (-1) the guardian relies on poll's timeout (at most a
        // second, so a resume is noticed within a second).
        return Self(unsafe {
            libc::timerfd_create(DEADLINE_CLOCK, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        });
        #[cfg(not(target_os = "linux"))]
        Self(-1)
    }

    /// Fires at `at` (on [`DEADLINE_CLOCK`]), replacing any earlier setting.
    fn set(&self, at: Duration) {
        #[cfg(target_os = "linux")]
        if self.0 >= 0 {
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    // (A zero value would disarm: 1 ns is as past as 0.)
                    tv_sec: libc::time_t::try_from(at.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: libc::c_long::from(at.subsec_nanos().max(1)),
                },
            };
            // SAFETY: a valid timerfd and itimerspec; the old value is not
            // asked for.
            unsafe {
                libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = at;
    }

    /// Clears a fired alarm (so that poll() blocks again).
    fn clear(&self) {
        if self.0 >= 0 {
            let mut expirations = [0u8; 8];
            // SAFETY: reads 8 bytes into a local; the timerfd is non-blocking.
            unsafe { libc::read(self.0, expirations.as_mut_ptr().cast(), 8) };
        }
    }
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
pub fn guard(args: &GuardArgs) -> ExitCode {
    match start(args) {
        Ok(command) => ExitCode::from(watch(args, command)),
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
        // Ignored (and reset for the command below): the guardian's group
        // is not the terminal's foreground group, so with `stty tostop` its
        // messages would stop it (SIGTTOU), and a stopped guardian enforces
        // no deadline.
        setup(
            "SIGTTOU",
            libc::signal(libc::SIGTTOU, libc::SIG_IGN) == libc::SIG_ERR,
        )?;
    }
    if clock_now() >= args.deadline_ns {
        eprintln!("leasehold: the lease's deadline passed before the command could start");
        return Err(EXIT_LEASE_LOST);
    }

    let guardian = super::pid_t(std::process::id());
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    #[cfg(target_os = "linux")]
    // SAFETY: signal, prctl and getppid are async-signal-safe. Should the guardian
    // itself be SIGKILLed, the command dies with it (the guardian has one
    // thread, so "the thread that forked" is the guardian's life); if it
    // died before the prctl, the command does not start.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != guardian {
                return Err(std::io::Error::other("the guardian is gone"));
            }
            Ok(())
        });
    }
    match command.spawn() {
        Ok(child) => Ok(super::pid_t(child.id())),
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
/// the command's exit code, or `EXIT_LEASE_LOST` if the lease's deadline
/// passed while the command ran.
fn watch(args: &GuardArgs, command: libc::pid_t) -> u8 {
    let mut code = None;
    let mut watched = true; // the pipe from `run` is still open
    let mut killing = false;
    let mut termed = false; // SIGTERM passed on (once: a second one could
                            // run a shell's trap twice)
    let mut expired = false; // stopping the command because of the deadline
    let mut garbled = false; // killing because of what came on the pipe
    let mut deadline = args.deadline_ns;
    let mut pending = Vec::with_capacity(2 * MAX_MESSAGE);
    let mut leftovers_until = None;
    let alarm = Alarm::new();
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
                if garbled {
                    eprintln!("leasehold: the guardian got a garbled message from `leasehold run`, and killed the command");
                }
                return if expired {
                    // Said only now (here and above): a write to a full
                    // stderr pipe blocks, and must not hold up the kill.
                    eprintln!(
                        "leasehold: no renewal of the lease on {} reached the guardian in time (was `leasehold run` stopped, traced or starved of CPU?); stopped the command before the lease could expire",
                        std::env::var("LEASEHOLD_LOCK").unwrap_or_default()
                    );
                    EXIT_LEASE_LOST
                } else {
                    code.unwrap_or(1)
                };
            }
        }
        let now = clock_now();
        let term_at = deadline.saturating_sub(args.grace);
        let kill_at = deadline.saturating_sub(KILL_LEAD);
        let from_run = TERM.swap(false, Ordering::SeqCst);
        if !killing && now >= term_at && !expired && code.is_none() {
            // `run` did not say the lease was renewed: it may be stopped,
            // and the lease expire at the deadline. Do what `run` would.
            expired = true;
        }
        if (from_run || now >= term_at) && !termed {
            signal_descendants(libc::SIGTERM);
            termed = true;
        }
        if now >= kill_at {
            killing = true;
        }
        if code.is_some() && leftovers_until.is_none() {
            // The command is done; what it started must not outlive it.
            signal_descendants(libc::SIGTERM);
            leftovers_until = Some(now + args.grace);
        }
        if leftovers_until.is_some_and(|until| now >= until) {
            killing = true;
        }
        if killing {
            if code.is_none() {
                // The command first, in one call, ahead of the walk of /proc
                // (not yet reaped, so the pid is still the command's).
                // SAFETY: kill() has no memory-safety preconditions.
                unsafe { libc::kill(command, libc::SIGKILL) };
            }
            signal_descendants(libc::SIGKILL);
        }

        // The next thing to do on time: SIGTERM before the deadline, SIGKILL
        // just ahead of it, SIGKILL to leftovers.
        let next = [(!termed).then_some(term_at), Some(kill_at), leftovers_until]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(kill_at);
        let timeout = if killing {
            10 // ms: until the killed are reaped (and to catch late forks)
        } else {
            alarm.set(next);
            // Rounded up; at most a second at a time (the loop recomputes
            // it, which also bounds a resume's delay without the alarm).
            next.saturating_sub(now).as_millis().min(1_000) as libc::c_int + 1
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
            libc::pollfd {
                fd: alarm.0,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of three pollfds; a negative fd is
        // ignored by poll.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        alarm.clear();
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a local buffer of the given size; the
        // self-pipe is non-blocking.
        while unsafe { libc::read(fds[0].fd, buf.as_mut_ptr().cast(), 64) } > 0 {}
        if watched && fds[1].revents != 0 {
            // SAFETY: as above; poll said it would not block. Several
            // messages may be waiting (the guardian was stopped): the last
            // one counts.
            let n = unsafe { libc::read(args.watch_fd, buf.as_mut_ptr().cast(), buf.len()) };
            let got = usize::try_from(n).ok().filter(|&n| n > 0);
            match got.map(|n| take_deadlines(&mut pending, &buf[..n])) {
                Some(Ok(Some(at))) => deadline = at,
                Some(Ok(None)) => {}
                Some(Err(())) => {
                    garbled = true;
                    watched = false;
                    killing = true;
                }
                // EOF or an error: `run` is gone or wants everything dead.
                None => {
                    watched = false;
                    killing = true;
                }
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
    let mut next = vec![super::pid_t(std::process::id())];
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
        // 0 to 255 (the low byte of the status the child gave exit()).
        u8::try_from(libc::WEXITSTATUS(status)).unwrap_or(u8::MAX)
    } else if libc::WIFSIGNALED(status) {
        128u8.saturating_add(u8::try_from(libc::WTERMSIG(status)).unwrap_or(u8::MAX))
    } else {
        1
    }
}
