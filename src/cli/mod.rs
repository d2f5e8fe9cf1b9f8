//! The command-line client: `acquire`, `release`, `describe`, `hold`,
//! `elect`, `run` and `health`. Each command prints what a person or a shell
//! script needs and exits with a documented code ([`EXIT_CODES`]).

mod guard;
mod health;
mod run;

use std::{process::ExitCode, time::Duration};

use tokio::time::{interval, Instant};

pub use self::{
    guard::{guard, GuardArgs},
    health::{health, HealthArgs},
    run::RunArgs,
};
use leasehold_client::{default_holder, AcquireOptions, Client, ClientError, Lease, LossReason};
use leasehold_server::duration::parse_duration;

/// Exit code: a bad flag, or a request the broker refuses as invalid (a
/// bad lock name, a wait over its --max-wait). sysexits' EX_USAGE: retrying
/// the same command cannot help, so it must not look like an outage.
pub const EXIT_USAGE: u8 = 64;
/// Exit code: the broker could not be reached, or cannot serve now
/// (UNAVAILABLE, RESOURCE_EXHAUSTED, ...). sysexits' EX_UNAVAILABLE: retry.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit code: the lock is held by someone else (and any wait ran out), unless
/// --busy-exit-code says otherwise. Like sysexits' EX_TEMPFAIL: try again
/// later.
pub const EXIT_LOCK_BUSY: u8 = 75;
/// Exit code: the lease was lost while held (`hold`, and `run`, which killed
/// its child), or is not the caller's (NOT_FOUND, FAILED_PRECONDITION).
pub const EXIT_LEASE_LOST: u8 = 76;
/// Exit code: the broker refused the caller (UNAUTHENTICATED: no or a wrong
/// token; PERMISSION_DENIED: a permission it lacks). sysexits' EX_NOPERM: a
/// credential to fix, not an outage to wait out.
pub const EXIT_NO_PERMISSION: u8 = 77;

/// The exit codes, as `--help` shows them (main's and the lock commands').
pub const EXIT_CODES: &str = "\
Exit codes:
  0    done (run: the command's own exit code instead)
  64   usage: a bad flag, or a request the broker refuses as invalid
       (INVALID_ARGUMENT, OUT_OF_RANGE: a bad lock name, --wait over the
       broker's --max-wait); retrying the same command cannot help
  69   the broker cannot be reached or cannot serve now (UNAVAILABLE,
       RESOURCE_EXHAUSTED, ...): retry later
  75   the lock is held by someone else and any --wait ran out
       (--busy-exit-code N chooses another code, e.g. 0)
  76   the lease was lost (hold, elect; run stopped its command), or it is
       not the caller's (NOT_FOUND, FAILED_PRECONDITION)
  77   the broker refused the caller: no or a wrong token (UNAUTHENTICATED),
       or a permission it lacks (PERMISSION_DENIED)
  126  run: the command could not be started
  127  run: the command was not found
  health exits 0 (healthy) or 1 (not), as Docker's HEALTHCHECK expects.";

/// Where the broker is.
#[derive(clap::Args, Clone, Debug)]
pub struct BrokerArgs {
    /// Broker URL; several, comma-separated, for replicas (any that answers).
    #[arg(
        long,
        env = "LEASEHOLD_BROKER",
        default_value = "http://127.0.0.1:7420"
    )]
    pub broker: String,
    /// For `https://` brokers: CA certificates (PEM) the broker's
    /// certificate must chain to (default: the system's roots).
    #[arg(long, env = "LEASEHOLD_BROKER_CA")]
    pub broker_ca: Option<std::path::PathBuf>,
    /// For brokers with mutual TLS: this client's certificate (PEM), with
    /// --client-key.
    #[arg(long, env = "LEASEHOLD_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --client-cert.
    #[arg(long, env = "LEASEHOLD_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,
    /// For brokers with an --auth-file: a file holding the bearer token
    /// (the token itself is read from a file or from LEASEHOLD_AUTH_TOKEN,
    /// never from the command line, where `ps` would show it).
    #[arg(long, env = "LEASEHOLD_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<std::path::PathBuf>,
}

impl BrokerArgs {
    /// The TLS settings given (files read now; an unreadable one exits 64
    /// naming it: a flag to fix).
    fn tls(&self) -> Result<leasehold_client::ClientTls, ExitCode> {
        let read = |flag: &str, path: &Option<std::path::PathBuf>| {
            path.as_ref()
                .map(|p| {
                    std::fs::read(p).map_err(|e| {
                        eprintln!("leasehold: {flag} {}: {e}", p.display());
                        ExitCode::from(EXIT_USAGE)
                    })
                })
                .transpose()
        };
        let cert = read("--client-cert", &self.client_cert)?;
        let key = read("--client-key", &self.client_key)?;
        Ok(leasehold_client::ClientTls {
            ca_pem: read("--broker-ca", &self.broker_ca)?,
            identity: cert.zip(key),
        })
    }

    /// The credentials: the token of --auth-token-file, else of the
    /// environment variable LEASEHOLD_AUTH_TOKEN. (Not LEASEHOLD_TOKEN:
    /// that is the owner token `acquire` prints and `release` reads.)
    fn credentials(&self) -> Result<leasehold_client::Credentials, ExitCode> {
        let token = match &self.auth_token_file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                eprintln!("leasehold: --auth-token-file {}: {e}", path.display());
                ExitCode::from(EXIT_USAGE)
            })?),
            None => std::env::var("LEASEHOLD_AUTH_TOKEN").ok(),
        };
        leasehold_client::Credentials::bearer(
            token.as_deref().map(str::trim).filter(|t| !t.is_empty()),
        )
        .map_err(|e| fail(&e))
    }

    fn urls(&self) -> Vec<String> {
        self.broker
            .split(',')
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect()
    }

    async fn client(&self) -> Result<Client, ExitCode> {
        let options = leasehold_client::ClientOptions {
            tls: Some(self.tls()?),
            credentials: self.credentials()?,
            ..Default::default()
        };
        Client::connect_any_with(self.urls(), &options)
            .await
            .map_err(|e| fail(&e))
    }
}

/// What to lock, and how.
#[derive(clap::Args, Clone, Debug)]
pub struct LockArgs {
    /// The lock name.
    #[arg(long)]
    pub lock: String,
    /// Lease TTL (e.g. `10s`), or `auto`: the broker chooses it from the
    /// heartbeat round trips it measures (10 times their p99, at least its
    /// --ttl-auto-floor) and adjusts it as they change.
    #[arg(long, default_value = "10s", value_parser = parse_ttl)]
    pub ttl: Ttl,
    /// How long to wait if the lock is held (`0`: try once; `forever`: as
    /// long as it takes). Waits longer than the broker's --max-wait are a
    /// chain of calls that keep their place in line.
    #[arg(long, default_value = "0s", value_parser = parse_wait)]
    pub wait: Duration,
    /// Label shown to others by `describe` (default: hostname:pid).
    #[arg(long)]
    pub holder: Option<String>,
    /// After an involuntary end of the lease (expiry, revoke), keep the lock
    /// from everyone for this long (e.g. `10s`).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub lock_delay: Duration,
    /// Make the lock a semaphore: up to this many holders at once.
    #[arg(long, default_value_t = 1)]
    pub limit: u32,
    #[command(flatten)]
    pub busy: BusyArgs,
}

/// What "someone else holds the lock" exits with.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct BusyArgs {
    /// Exit code when the lock is held by someone else (and any --wait ran
    /// out), as `flock -E`: e.g. 0 for a cron job that should just skip.
    #[arg(long, value_name = "N", default_value_t = EXIT_LOCK_BUSY, value_parser = parse_exit_code)]
    pub busy_exit_code: u8,
}

/// A lease TTL as the commands take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// This TTL.
    Fixed(Duration),
    /// The broker's choice (`AcquireOptions::ttl_auto`).
    Auto,
}

impl Ttl {
    /// `options` asking for this TTL.
    fn apply(self, options: AcquireOptions) -> AcquireOptions {
        match self {
            Ttl::Fixed(ttl) => options.ttl(ttl),
            Ttl::Auto => options.ttl_auto(),
        }
    }
}

/// A TTL: a duration, or `auto`.
fn parse_ttl(text: &str) -> Result<Ttl, String> {
    if text.trim().eq_ignore_ascii_case("auto") {
        return Ok(Ttl::Auto);
    }
    parse_duration(text)
        .map(Ttl::Fixed)
        .map_err(|e| format!("{e}, or auto"))
}

/// A wait: a duration, or `forever` (`Duration::MAX`).
fn parse_wait(text: &str) -> Result<Duration, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Duration::MAX);
    }
    parse_duration(text).map_err(|e| format!("{e}, or forever"))
}

/// An exit code: 0 to 255.
fn parse_exit_code(text: &str) -> Result<u8, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{text}' is not an exit code: give a whole number from 0 to 255"))
}

impl LockArgs {
    fn options(&self) -> AcquireOptions {
        self.ttl
            .apply(AcquireOptions::new())
            .wait(self.wait)
            .holder(self.holder.clone().unwrap_or_else(default_holder))
            .lock_delay(self.lock_delay)
            .limit(self.limit)
    }
}

/// `leasehold acquire`: take a lease once and print it as `export` lines.
#[derive(clap::Args, Debug)]
pub struct AcquireArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(flatten)]
    lock: LockArgs,
}

/// `leasehold release`: release a lease by name and owner token.
#[derive(clap::Args, Debug)]
pub struct ReleaseArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The lock name.
    #[arg(long)]
    lock: String,
    /// The owner token printed by `acquire`.
    #[arg(long, env = "LEASEHOLD_TOKEN", hide_env_values = true)]
    token: String,
}

/// `leasehold describe`: who holds a lock.
#[derive(clap::Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The lock name.
    #[arg(long)]
    lock: String,
    /// Another tenant's lock (needs the `admin` permission); `@root` for the
    /// root namespace (callers without --auth-file); default: your own.
    #[arg(long, default_value = "")]
    tenant: String,
    #[command(flatten)]
    output: OutputArgs,
}

/// `leasehold list`: the locks with something on them.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Only names that start with this (default: every name).
    #[arg(default_value = "")]
    prefix: String,
    /// Another tenant's locks (needs the `admin` permission); `@root` for
    /// the root namespace; `*` for every tenant's; default: your own.
    #[arg(long, default_value = "")]
    tenant: String,
    /// Names the broker looks at per call (at most 1000): smaller pages
    /// load the store less per call and take more calls.
    #[arg(long, default_value_t = 1000)]
    page_size: u32,
    /// Stop after this many locks (0: no limit).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    #[command(flatten)]
    output: OutputArgs,
}

/// How a command prints what it learnt.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct OutputArgs {
    /// `text`: `key=value` pairs on one line; `json`: one JSON object per
    /// line, for jq and scripts.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// See [`OutputArgs`].
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// `key=value` pairs.
    Text,
    /// One JSON object per line.
    Json,
}

/// Prints `value` as one line of JSON.
fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// `leasehold revoke`: end anyone's lease (needs the `admin` permission, or
/// a broker with --enable-revoke and no --auth-file).
#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The lock name.
    #[arg(long)]
    lock: String,
    /// Another tenant's lock; `@root` for the root namespace (callers
    /// without --auth-file); default: your own.
    #[arg(long, default_value = "")]
    tenant: String,
}

/// `leasehold token`: make a bearer token for an --auth-file.
#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// The tenant the token will be for (goes into the printed line);
    /// `@root` keeps its callers in the root namespace, where the locks of
    /// a broker without --auth-file are.
    #[arg(long)]
    tenant: String,
    /// Its permissions: `use`, `admin` or `use,admin`.
    #[arg(long, default_value = "use")]
    permissions: String,
    /// Do not make a token: read one from standard input and print the
    /// --auth-file line for it.
    #[arg(long)]
    stdin: bool,
}

/// Prints a new token on standard output (for the client) and its
/// --auth-file line on standard error (for the broker): the two never go to
/// the same place by accident.
pub fn token(args: &TokenArgs) -> ExitCode {
    let token = if args.stdin {
        let mut text = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
            eprintln!("leasehold: reading the token from standard input: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
        text.trim().to_owned()
    } else {
        match leasehold_server::auth::generate_token() {
            Ok(token) => token,
            Err(e) => {
                eprintln!("leasehold: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    if token.is_empty() {
        eprintln!("leasehold: the token on standard input is empty");
        return ExitCode::from(EXIT_USAGE);
    }
    let entry = format!(
        "{} {} {}",
        args.tenant,
        args.permissions,
        leasehold_server::auth::token_credential(&token)
    );
    // Checked as the broker will read it: a bad tenant or permission is
    // said now, not when the broker loads the file.
    if let Err(e) = leasehold_server::auth::check_line(&entry) {
        eprintln!("leasehold: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    if args.stdin {
        println!("{entry}");
    } else {
        println!("{token}");
        eprintln!("{entry}");
    }
    ExitCode::SUCCESS
}

/// `leasehold check-fence`: is this fence the current holder's?
#[derive(clap::Args, Debug)]
pub struct CheckFenceArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The lock name.
    #[arg(long)]
    lock: String,
    /// The fence to check (e.g. from LEASEHOLD_FENCE).
    #[arg(long, env = "LEASEHOLD_FENCE")]
    fence: u64,
    #[command(flatten)]
    output: OutputArgs,
}

/// `leasehold elect`: campaign, then hold the leadership until Ctrl-C.
#[derive(clap::Args, Debug)]
pub struct ElectArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The election.
    #[arg(long)]
    election: String,
    /// This candidate's value (an address, an id), shown to observers.
    #[arg(long)]
    value: String,
    /// Leadership lease TTL.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to campaign before giving up (default: until elected or
    /// interrupted).
    #[arg(long, default_value = "forever", value_parser = parse_wait)]
    wait: Duration,
    #[command(flatten)]
    busy: BusyArgs,
}

/// `leasehold observe`: print every change of an election's leadership.
#[derive(clap::Args, Debug)]
pub struct ObserveArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The election.
    #[arg(long)]
    election: String,
    #[command(flatten)]
    output: OutputArgs,
}

/// `leasehold hold`: take a lease and keep it until Ctrl-C or SIGTERM.
#[derive(clap::Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(flatten)]
    lock: LockArgs,
}

/// The exit code of an error (see [`EXIT_CODES`]); `busy` for "someone else
/// holds the lock".
fn exit_code(e: &ClientError, busy: u8) -> u8 {
    use tonic::Code;
    match e {
        ClientError::NotAcquired(_) => busy,
        ClientError::Lost(_) => EXIT_LEASE_LOST,
        ClientError::Config(_) => EXIT_USAGE,
        ClientError::Connect(_) => EXIT_UNAVAILABLE,
        ClientError::Refused(refusal) => match refusal.code() {
            Code::InvalidArgument | Code::OutOfRange => EXIT_USAGE,
            Code::NotFound | Code::FailedPrecondition => EXIT_LEASE_LOST,
            Code::Unauthenticated | Code::PermissionDenied => EXIT_NO_PERMISSION,
            _ => EXIT_UNAVAILABLE,
        },
    }
}

/// Says what went wrong and exits with its code.
fn fail(e: &ClientError) -> ExitCode {
    fail_busy(e, EXIT_LOCK_BUSY)
}

/// [`fail`], exiting with `busy` if someone else holds the lock.
fn fail_busy(e: &ClientError, busy: u8) -> ExitCode {
    fail_in(e, busy, Flags::Lock)
}

/// Which flags name a lock and its holder label in a command.
#[derive(Clone, Copy)]
enum Flags {
    /// `--lock`, `--holder`.
    Lock,
    /// `--election`, `--value` (`elect`, `observe`).
    Election,
}

/// [`fail_busy`], naming the flags of a command with `flags`.
fn fail_in(e: &ClientError, busy: u8, flags: Flags) -> ExitCode {
    match flag_of(e, flags) {
        Some(flag) => eprintln!("leasehold: {flag}: {e}"),
        None => eprintln!("leasehold: {e}"),
    }
    ExitCode::from(exit_code(e, busy))
}

/// The command's flag for the argument a refusal names (its
/// `BAD_ARGUMENT` detail), so that the message points at what to change.
fn flag_of(e: &ClientError, flags: Flags) -> Option<&'static str> {
    let refusal = e.refusal()?;
    if refusal.reason() != "BAD_ARGUMENT" {
        return None;
    }
    Some(match (refusal.get("argument")?, flags) {
        ("name", Flags::Lock) => "--lock",
        ("name", Flags::Election) => "--election",
        ("holder", Flags::Lock) => "--holder",
        ("holder", Flags::Election) => "--value",
        ("ttl", _) => "--ttl",
        ("wait", _) => "--wait",
        ("lock_delay", _) => "--lock-delay",
        ("limit", _) => "--limit",
        ("owner_token", _) => "--token",
        _ => return None,
    })
}

/// `value` quoted for a POSIX shell: `'...'`, each `'` inside as `'\''`.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Takes the lease once (it is not kept alive: it expires at its TTL unless
/// renewed) and prints `export LEASEHOLD_*=...` lines, quoted, for
/// `eval "$(leasehold acquire ...)"`: exported, so that the commands the
/// script then starts (`leasehold release`, which reads LEASEHOLD_TOKEN, or
/// the job that needs the fence) see them.
pub async fn acquire(args: AcquireArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut options = args
        .lock
        .ttl
        .apply(AcquireOptions::new())
        .wait(args.lock.wait)
        .lock_delay(args.lock.lock_delay)
        .limit(args.lock.limit);
    if let Some(holder) = &args.lock.holder {
        options = options.holder(holder.clone());
    }
    match client.grant(&args.lock.lock, options).await {
        Ok(lease) => {
            println!("export LEASEHOLD_LOCK={}", shell_quote(&lease.name));
            println!("export LEASEHOLD_FENCE={}", lease.fence);
            println!("export LEASEHOLD_TOKEN={}", shell_quote(&lease.owner_token));
            println!("export LEASEHOLD_TTL_MS={}", lease.ttl.as_millis());
            ExitCode::SUCCESS
        }
        Err(e) => fail_busy(&e, args.lock.busy.busy_exit_code),
    }
}

/// Releases a lease by name and token.
pub async fn release(args: ReleaseArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.release_token(&args.lock, &args.token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Lists the locks with something on them (held, permits, waiters, a
/// lock-delay): a table, or one JSON object per lock with `-o json`. Walks
/// every page the broker gives (each a bounded call), and sorts the whole:
/// a Redis store lists in its own order, and may list a name twice across
/// pages (kept once).
pub async fn list(args: ListArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut locks = std::collections::BTreeMap::new();
    let mut token = String::new();
    let mut cut = false;
    loop {
        let page = match client
            .list_page(&args.tenant, &args.prefix, args.page_size, &token)
            .await
        {
            Ok(page) => page,
            Err(e) => return fail_list(&e),
        };
        for lock in page.locks {
            locks.insert((lock.tenant.clone(), lock.name.clone()), lock);
        }
        if args.limit > 0 && locks.len() >= args.limit {
            cut = !page.next_page_token.is_empty() || locks.len() > args.limit;
            break;
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut locks: Vec<_> = locks.into_values().collect();
    if args.limit > 0 {
        locks.truncate(args.limit);
    }
    let all_tenants = args.tenant == "*";
    if args.output.output == Output::Json {
        for l in &locks {
            print_json(&listed_json(l));
        }
    } else {
        print!("{}", list_table(&locks, all_tenants));
    }
    if cut {
        eprintln!(
            "leasehold: the first {} locks shown (--limit); there may be more",
            locks.len()
        );
    }
    ExitCode::SUCCESS
}

/// A refused listing, naming the command's own flags.
fn fail_list(e: &ClientError) -> ExitCode {
    let flag = e
        .refusal()
        .filter(|r| r.reason() == "BAD_ARGUMENT")
        .and_then(|r| match r.get("argument")? {
            "prefix" => Some("PREFIX"),
            "page_size" => Some("--page-size"),
            "tenant" => Some("--tenant"),
            _ => None,
        });
    match flag {
        Some(flag) => eprintln!("leasehold: {flag}: {e}"),
        None => eprintln!("leasehold: {e}"),
    }
    ExitCode::from(exit_code(e, EXIT_LOCK_BUSY))
}

/// A listed lock as one JSON object (Describe's keys, with its name and
/// tenant).
fn listed_json(l: &leasehold_client::Listed) -> serde_json::Value {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    serde_json::json!({
        "tenant": l.tenant,
        "lock": l.name,
        "held": l.held,
        "holder": l.holder,
        "fence": l.fence,
        "remaining_ms": ms(l.remaining),
        "ttl_ms": ms(l.ttl),
        "granted_at_unix_ms": ms(l.granted_at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default()),
        "lock_delay_remaining_ms": ms(l.lock_delay_remaining),
        "permits_held": l.permits_held,
        "waiters": l.waiters,
    })
}

/// The locks as a table for a person: one row each, columns aligned, the
/// state in words (`held`, `permits`, `delay`, `waiting`), times in the
/// largest unit that reads well.
fn list_table(locks: &[leasehold_client::Listed], all_tenants: bool) -> String {
    use leasehold_server::duration::format_duration;
    let mut rows = vec![{
        let mut header = vec!["NAME", "STATE", "HOLDER", "FENCE", "LEFT", "TTL", "WAITERS"];
        if all_tenants {
            header.insert(0, "TENANT");
        }
        header.into_iter().map(str::to_owned).collect::<Vec<_>>()
    }];
    // Times to the second past ten seconds, to the tenth below: a table
    // is read, not parsed (-o json has milliseconds).
    let left = |d: Duration| {
        if d >= Duration::from_secs(10) {
            format_duration(Duration::from_secs(d.as_secs()))
        } else {
            format!("{:.1} s", d.as_secs_f64())
        }
    };
    for l in locks {
        let (state, holder, fence, remaining, ttl) = if l.held {
            (
                "held".to_owned(),
                l.holder.clone(),
                l.fence.to_string(),
                left(l.remaining),
                format_duration(l.ttl),
            )
        } else if l.permits_held > 0 {
            (
                format!("{} permits", l.permits_held),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            )
        } else if !l.lock_delay_remaining.is_zero() {
            (
                "delay".to_owned(),
                "-".into(),
                "-".into(),
                left(l.lock_delay_remaining),
                "-".into(),
            )
        } else {
            (
                "waiting".to_owned(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            )
        };
        let mut row = vec![
            l.name.clone(),
            state,
            holder,
            fence,
            remaining,
            ttl,
            l.waiters.to_string(),
        ];
        if all_tenants {
            row.insert(0, l.tenant.clone());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Prints who holds a lock.
pub async fn describe(args: DescribeArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.describe_in(&args.tenant, &args.lock).await {
        Ok(d) if args.output.output == Output::Json => {
            let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            let granted_at = d
                .granted_at
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            print_json(&serde_json::json!({
                "lock": args.lock,
                "held": d.held,
                "holder": d.holder,
                "fence": d.fence,
                "remaining_ms": ms(d.remaining),
                "ttl_ms": ms(d.ttl),
                "granted_at_unix_ms": ms(granted_at),
                "lock_delay_ms": ms(d.lock_delay),
                "lock_delay_remaining_ms": ms(d.lock_delay_remaining),
                "permits_held": d.permits_held,
                "waiters": d.waiters,
                "local_waiters": d.local_waiters,
            }));
            ExitCode::SUCCESS
        }
        Ok(d) => {
            if d.held {
                println!(
                    "lock={} held=true holder={:?} fence={} remaining_ms={} ttl_ms={} granted_at_unix_ms={} \
                     lock_delay_ms={} waiters={} local_waiters={}",
                    args.lock,
                    d.holder,
                    d.fence,
                    d.remaining.as_millis(),
                    d.ttl.as_millis(),
                    d.granted_at
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis(),
                    d.lock_delay.as_millis(),
                    d.waiters,
                    d.local_waiters
                );
            } else {
                println!(
                    "lock={} held=false permits_held={} lock_delay_remaining_ms={} waiters={} local_waiters={}",
                    args.lock,
                    d.permits_held,
                    d.lock_delay_remaining.as_millis(),
                    d.waiters,
                    d.local_waiters
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// Revokes the current lease on a lock and prints its fence.
pub async fn revoke(args: RevokeArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.revoke_in(&args.tenant, &args.lock).await {
        Ok(fence) => {
            println!("revoked lock={} fence={fence}", args.lock);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// Exits 0 if the fence is the current holder's, 76 if not.
pub async fn check_fence(args: CheckFenceArgs) -> ExitCode {
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.check_fence(&args.lock, args.fence).await {
        Ok((current, current_fence)) => {
            if args.output.output == Output::Json {
                print_json(&serde_json::json!({
                    "lock": args.lock,
                    "fence": args.fence,
                    "current": current,
                    "current_fence": current_fence,
                }));
            } else {
                println!(
                    "lock={} fence={} current={current} current_fence={current_fence}",
                    args.lock, args.fence
                );
            }
            if current {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_LEASE_LOST)
            }
        }
        Err(e) => fail(&e),
    }
}

/// Campaigns, then holds the leadership like `hold` (the lock is the
/// election, the holder label the value), in an election's words.
pub async fn elect(args: ElectArgs) -> ExitCode {
    let words = Words::Election {
        value: args.value.clone(),
    };
    keep(
        HoldArgs {
            broker: args.broker,
            lock: LockArgs {
                lock: args.election,
                ttl: Ttl::Fixed(args.ttl),
                wait: args.wait,
                holder: Some(args.value),
                lock_delay: Duration::ZERO,
                limit: 1,
                busy: args.busy,
            },
        },
        words,
    )
    .await
}

/// Prints the leadership of an election, then each change, until Ctrl-C.
pub async fn observe(args: ObserveArgs) -> ExitCode {
    let stop = leasehold_server::shutdown::signal();
    tokio::pin!(stop);
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut observation = match client.observe(&args.election).await {
        Ok(o) => o,
        Err(e) => return fail_in(&e, EXIT_LOCK_BUSY, Flags::Election),
    };
    loop {
        let change = tokio::select! {
            change = observation.next() => change,
            () = &mut stop => return ExitCode::SUCCESS,
        };
        match change {
            Some(Ok(Some(leader))) if args.output.output == Output::Json => {
                print_json(&serde_json::json!({
                    "election": args.election,
                    "leader": true,
                    "value": leader.value,
                    "term": leader.term,
                }));
            }
            Some(Ok(None)) if args.output.output == Output::Json => {
                print_json(&serde_json::json!({ "election": args.election, "leader": false }));
            }
            Some(Ok(Some(leader))) => {
                println!(
                    "leader election={} value={:?} term={}",
                    args.election, leader.value, leader.term
                );
            }
            Some(Ok(None)) => println!("no-leader election={}", args.election),
            Some(Err(e)) => return fail(&e),
            None => return ExitCode::from(EXIT_UNAVAILABLE),
        }
    }
}

/// Takes the lease and keeps it alive, printing its state, until Ctrl-C or
/// SIGTERM (then releases it) or until it is lost.
///
/// Every status line is printed only after `Lease::check`, the way an
/// application should guard each write: a process that was paused past its
/// deadline reports the loss before anything else.
pub async fn hold(args: HoldArgs) -> ExitCode {
    keep(args, Words::Lock).await
}

/// How `hold` and `elect` word their status lines: a lock and its holder's
/// fence, or an election and its leader's term (the same number: a term is
/// the leadership lease's fence).
enum Words {
    Lock,
    Election { value: String },
}

impl Words {
    fn flags(&self) -> Flags {
        match self {
            Words::Lock => Flags::Lock,
            Words::Election { .. } => Flags::Election,
        }
    }

    fn granted(&self, lease: &Lease) -> String {
        let ttl_ms = lease.ttl().as_millis();
        match self {
            Words::Lock => format!(
                "granted lock={} fence={} ttl_ms={ttl_ms}",
                lease.name(),
                lease.fence()
            ),
            Words::Election { value } => format!(
                "elected election={} value={value:?} term={} ttl_ms={ttl_ms}",
                lease.name(),
                lease.fence()
            ),
        }
    }

    fn holding(&self, lease: &Lease) -> String {
        let valid_for_ms = lease
            .deadline()
            .saturating_duration_since(Instant::now())
            .as_millis();
        let (what, name, number) = match self {
            Words::Lock => ("holding lock", "fence", lease.fence()),
            Words::Election { .. } => ("leading election", "term", lease.fence()),
        };
        format!(
            "{what}={} {name}={number} valid_for_ms={valid_for_ms}",
            lease.name()
        )
    }

    fn lost(&self, name: &str, reason: LossReason) -> String {
        match self {
            Words::Lock => format!("lost lock={name} reason={reason:?}"),
            Words::Election { .. } => format!("deposed election={name} reason={reason:?}"),
        }
    }

    fn released(&self, name: &str) -> String {
        match self {
            Words::Lock => format!("released lock={name}"),
            Words::Election { .. } => format!("resigned election={name}"),
        }
    }
}

/// `hold` and `elect`: takes the lease and keeps it, saying so in `words`.
async fn keep(args: HoldArgs, words: Words) -> ExitCode {
    let stop = leasehold_server::shutdown::signal();
    let client = match args.broker.client().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let lease = match client.acquire(&args.lock.lock, args.lock.options()).await {
        Ok(lease) => lease,
        Err(e) => return fail_in(&e, args.lock.busy.busy_exit_code, words.flags()),
    };
    println!("{}", words.granted(&lease));
    let mut tick = interval((lease.ttl() / 3).max(Duration::from_millis(100)));
    let mut advice = Advice::of(&client);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = advice.next() => {}
            reason = lease.lost() => {
                println!("{}", words.lost(lease.name(), reason));
                return ExitCode::from(EXIT_LEASE_LOST);
            }
            () = &mut stop => {
                let name = lease.name().to_owned();
                return match lease.release().await {
                    Ok(()) => {
                        println!("{}", words.released(&name));
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e),
                };
            }
            _ = tick.tick() => match lease.check() {
                Ok(()) => println!("{}", words.holding(&lease)),
                Err(reason) => {
                    println!("{}", words.lost(lease.name(), reason));
                    return ExitCode::from(EXIT_LEASE_LOST);
                }
            },
        }
    }
}

pub use self::run::run;

/// The broker's TTL advice as a command prints it: one line on standard
/// error when advice appears (not at every heartbeat that repeats it), and
/// one when it clears.
struct Advice {
    changes: tokio::sync::watch::Receiver<Option<leasehold_client::TtlAdvice>>,
    shown: bool,
}

impl Advice {
    fn of(client: &Client) -> Self {
        Advice {
            changes: client.ttl_advice_changes(),
            shown: false,
        }
    }

    /// Waits for the advice to change, and says so if it appeared or
    /// cleared. Never resolves once the client is gone.
    async fn next(&mut self) {
        if self.changes.changed().await.is_err() {
            return std::future::pending().await;
        }
        let advice = self.changes.borrow_and_update().clone();
        match (advice, self.shown) {
            (Some(advice), false) => {
                // In whole seconds, rounded up: what --ttl takes as written.
                let seconds = advice.suggested_ttl.as_millis().div_ceil(1_000);
                eprintln!(
                    "leasehold: TTL advice from the broker: {} (here: --ttl {seconds}s, or --ttl auto)",
                    advice.message,
                );
                self.shown = true;
            }
            (None, true) => {
                eprintln!("leasehold: the broker's TTL advice no longer applies");
                self.shown = false;
            }
            _ => {}
        }
    }
}

/// A process id as the C calls take it. Linux's pids are at most 2^22
/// (`/proc/sys/kernel/pid_max`), so every `u32` the standard library hands
/// out fits.
fn pid_t(pid: u32) -> libc::pid_t {
    libc::pid_t::try_from(pid).expect("a Linux pid fits pid_t")
}
