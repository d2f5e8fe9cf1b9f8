//! The `leasehold` binary: `serve` (the broker, from the `leasehold-server`
//! library) and the client commands (`cli`, on the `leasehold-client`
//! crate). Parses the command line, sets up logging and hands over.

use std::process::ExitCode;

mod cli;

/// mimalloc instead of glibc's malloc: a gRPC call allocates and frees
/// dozens of small buffers (HTTP/2 frames, headers, messages, Redis
/// commands), and in a profile of the broker at 64 concurrent callers
/// glibc's malloc, free and their consolidation were a third of its CPU
/// (BENCHMARKS.md, "Where a call's CPU goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use leasehold_server::config::{LogFormat, ServeConfig};
use tokio::net::TcpListener;

/// Leasehold: a distributed lock broker with fencing tokens.
///
/// The client commands exit with the codes below (sysexits' where one
/// fits), so that a script or a Job can tell "try later" (69, 75) from "fix
/// the command" (64, 77).
#[derive(Parser)]
#[command(version, about, long_about, after_help = cli::EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(Box<ServeConfig>),
    /// Create or upgrade a PostgreSQL store's schema now, then exit.
    ///
    /// For deployments whose brokers may not run DDL: run this once per
    /// version with a role that may (it is idempotent), and the brokers,
    /// finding the schema at their version, run none. Takes the broker's
    /// --store and --key-prefix (the prefix names the schema).
    Migrate(MigrateArgs),
    /// Take a lease once and print it as `export LEASEHOLD_*=...` lines for
    /// `eval` (the lease is not kept alive).
    #[command(after_help = cli::EXIT_CODES)]
    Acquire(cli::AcquireArgs),
    /// Release a lease by name and owner token.
    Release(cli::ReleaseArgs),
    /// Show who holds a lock.
    Describe(cli::DescribeArgs),
    /// List the locks with something on them (held, permits, waiters).
    List(cli::ListArgs),
    /// Say whether a fence is the current holder's (exit 0) or not (76).
    CheckFence(cli::CheckFenceArgs),
    /// End anyone's lease on a lock (needs the `admin` permission).
    Revoke(cli::RevokeArgs),
    /// Make a bearer token: the token on stdout, its --auth-file line on
    /// stderr.
    Token(cli::TokenArgs),
    /// Campaign in an election, then hold the leadership until Ctrl-C.
    #[command(after_help = cli::EXIT_CODES)]
    Elect(cli::ElectArgs),
    /// Print an election's leader, then every change.
    Observe(cli::ObserveArgs),
    /// Take a lease and keep it until Ctrl-C, printing its state.
    #[command(after_help = cli::EXIT_CODES)]
    Hold(cli::HoldArgs),
    /// Run a command while holding a lease; stop it if the lease is lost.
    ///
    /// The command gets LEASEHOLD_LOCK and LEASEHOLD_FENCE in its environment.
    /// If the lease is lost, or renewals stop getting through, the command
    /// and everything it started are stopped (SIGTERM, then SIGKILL after
    /// --kill-grace) before the lease could expire; SIGTERM and SIGINT to
    /// `run` are passed on the same way. Exits with the command's exit code.
    ///
    /// Nothing the command starts outlives `run`: a guardian process between
    /// `run` and the command (a subreaper, so that descendants which
    /// daemonize, by double fork, setsid or a process group of their own,
    /// stay in its tree) SIGKILLs every descendant as soon as `run` dies,
    /// even by SIGKILL, the OOM killer or SIGHUP; and when the command exits,
    /// what it left running gets SIGTERM, then SIGKILL after --kill-grace,
    /// before the lease is released. Not covered: processes started through
    /// another service (systemd-run, at, ssh, docker), which are not
    /// descendants; a guardian that is itself killed (the command and its
    /// process group still die, a descendant that left the group may not);
    /// and `run` stopped (SIGSTOP, Ctrl-Z) while its command runs on.
    ///
    /// If the lock is held by someone else, the command does not run and
    /// `run` exits with --busy-exit-code (75 unless set; 0 makes a skipped
    /// cron run a success). Pick codes the command itself does not use.
    #[command(after_help = cli::EXIT_CODES)]
    Run(cli::RunArgs),
    /// Ask a broker's gRPC health service; exit 0 if it answers, 1 if not.
    ///
    /// For a Docker HEALTHCHECK or an exec probe (e.g. a sidecar that
    /// listens on 127.0.0.1 only). By default any answer counts, SERVING or
    /// NOT_SERVING: the broker process runs, whether or not its store is
    /// reachable right now, so a Redis blip does not mark every broker
    /// unhealthy at once. --store requires SERVING as well.
    Health(cli::HealthArgs),
    /// `run`'s guardian of its command (started by `run` only).
    #[command(name = "__guard", hide = true)]
    Guard(cli::GuardArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version go to stdout and succeed; a bad flag is a
        // usage error (64), not clap's 2, which a wrapped command could
        // mean for itself.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(cli::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // `run`'s guardian: small, one thread, no async runtime.
    let cli = match cli.command {
        Command::Guard(args) => return cli::guard(&args),
        command => Cli { command },
    };
    // The broker's threads are its own setting; every other command (a
    // client, a load generator) has little to do at once and runs on one
    // thread, which costs least per call and leaves the cores to the broker
    // and Redis when they share the machine.
    let runtime = match &cli.command {
        Command::Serve(config) if config.runtime_threads() != 1 => {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(config.runtime_threads())
                .enable_all()
                .build()
        }
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    };
    match runtime {
        Ok(runtime) => runtime.block_on(dispatch(cli)),
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(config) => {
            init_tracing(config.log_format, "info", config.audit_log);
            match serve(*config).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "broker stopped");
                    ExitCode::FAILURE
                }
            }
        }
        command => {
            // Client commands print results on stdout; logs only on
            // request. The TTL advice they print as a line of their own.
            init_tracing(LogFormat::Pretty, "warn", true);
            match command {
                Command::Acquire(args) => cli::acquire(args).await,
                Command::Release(args) => cli::release(args).await,
                Command::Describe(args) => cli::describe(args).await,
                Command::List(args) => cli::list(args).await,
                Command::Hold(args) => cli::hold(args).await,
                Command::Elect(args) => cli::elect(args).await,
                Command::Observe(args) => cli::observe(args).await,
                Command::CheckFence(args) => cli::check_fence(args).await,
                Command::Revoke(args) => cli::revoke(args).await,
                Command::Token(args) => cli::token(&args),
                Command::Run(args) => cli::run(args).await,
                Command::Health(args) => cli::health(args).await,
                Command::Migrate(args) => migrate(args).await,
                Command::Serve(_) | Command::Guard(_) => unreachable!("handled above"),
            }
        }
    }
}

/// `leasehold migrate`'s flags: the broker's own, by the same names and
/// environment variables, so that one configuration serves both.
#[derive(clap::Args)]
struct MigrateArgs {
    /// The PostgreSQL store: `postgres://user:password@host:5432/db`.
    #[arg(long, env = "LEASEHOLD_STORE", hide_env_values = true)]
    store: String,
    /// The broker's --key-prefix: it names the schema.
    #[arg(long, env = "LEASEHOLD_KEY_PREFIX", default_value = "leasehold:")]
    key_prefix: String,
    /// How long the migration may take.
    #[arg(long, default_value = "30s", value_parser = leasehold_server::duration::parse_duration)]
    timeout: std::time::Duration,
}

/// Brings the schema to this broker's version; exit 0 when it is there.
async fn migrate(args: MigrateArgs) -> ExitCode {
    use leasehold_server::store::{PostgresStore, StoreOptions};
    if !(args.store.starts_with("postgres://") || args.store.starts_with("postgresql://")) {
        eprintln!("leasehold: migrate is for a PostgreSQL store (postgres://...); Redis and memory stores need none");
        return ExitCode::from(cli::EXIT_USAGE);
    }
    let options = StoreOptions::new(args.key_prefix, args.timeout);
    match PostgresStore::migrate(&args.store, &options).await {
        Ok(schema) => {
            println!("PostgreSQL schema '{schema}' is ready");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("leasehold: migrate failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    let grpc = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", config.listen))?;
    let metrics = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|e| {
            format!(
                "cannot listen on {} (--metrics-listen): {e}",
                config.metrics_listen
            )
        })?;
    leasehold_server::service::run(grpc, metrics, config, leasehold_server::shutdown::signal())
        .await?;
    Ok(())
}

/// Logs to stderr at `RUST_LOG` (else `default_level`); without `audit`,
/// the audit trail's target is off whatever the level. The client's TTL
/// advice log is always off: the commands print the advice themselves
/// (the broker's own advice log has a target of its own).
fn init_tracing(format: LogFormat, default_level: &str, audit: bool) {
    use tracing_subscriber::EnvFilter;
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let mut off = vec![leasehold_client::TTL_ADVICE_TARGET];
    if !audit {
        off.push(leasehold_server::lease::audit::TARGET);
    }
    for target in off {
        if let Ok(off) = format!("{target}=off").parse() {
            filter = filter.add_directive(off);
        }
    }
    // Colours only for a person at a terminal, never into log files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Pretty => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
