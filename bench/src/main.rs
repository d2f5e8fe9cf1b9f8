//! `leasehold-bench`: load generators for Leasehold, bounded in time,
//! printing the figures quoted in docs/ and BENCHMARKS.md. Not part of
//! the shipped binary or image.
//!
//! They measure the broker through its public API (gRPC), against two
//! references on the same machine: Redis driven straight through the
//! broker's own store layer (`leasehold-server`'s `Store`, the same Lua
//! scripts: the floor no broker can beat), and etcd's lease and lock API
//! (etcd 3.4's protos, vendored in `server/proto/etcd/`, compiled by this crate's
//! build.rs). `etcd-mapping` measures the two ways an etcd store could hold
//! a lease (the design study of that store).
//!
//! Brokers of the bench's own are `leasehold serve` child processes (their
//! CPU and memory are read from /proc): the `leasehold` binary beside this
//! one, or `$LEASEHOLD_BIN`.

mod broker;
mod cycles;
mod etcd;
mod etcd_mapping;
mod floor;
mod heartbeats;
mod keepalive;
mod list;
mod plain;
mod probe;
mod session;
mod soak;
mod stats;
mod waiters;
mod zookeeper;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, as the `leasehold` binary: the floor server (`floor
/// --serve-floor`) runs in this binary and must allocate as the broker does
/// to be its floor; the load generators' CPU per call is measured with it
/// too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code: the broker (or a store it needs) could not be reached, or a
/// run failed (sysexits' EX_UNAVAILABLE, as the `leasehold` client commands).
const EXIT_BROKER_ERROR: u8 = 69;

/// Load generators for Leasehold.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Heartbeat round trips on one KeepAlive stream holding N leases: each
    /// heartbeat renews all N (one store round trip) and the next is sent
    /// when the answer arrives.
    Keepalive(keepalive::KeepaliveArgs),
    /// A bounded soak: starts its own broker, keeps N leases alive over S
    /// streams, and reports the broker's RSS, heartbeat p99 and lost leases.
    Soak(soak::SoakArgs),
    /// Acquire+release cycles through a broker and straight against Redis
    /// with the same scripts (the ratio), then one contended lock.
    Cycles(cycles::CyclesArgs),
    /// N leases kept alive over S KeepAlive streams through a broker and
    /// renewed straight against the store (Redis, PostgreSQL or etcd) with the
    /// same batching: renewal latency, losses, CPU and memory of broker and
    /// store.
    Heartbeats(heartbeats::HeartbeatsArgs),
    /// N callers waiting on one lock through a broker of the bench's own:
    /// Redis and broker CPU while they wait, then handoffs down the line
    /// (each grantee releases at once and queues again at the back):
    /// handoffs per second and handoff latency percentiles.
    Waiters(waiters::WaitersArgs),
    /// The gRPC floor and the client library's cost: acquire+release cycles
    /// against a bare tonic server of the bench's own (a child process:
    /// canned answers, no store, the broker's allocator, thread and HTTP/2
    /// settings), its CPU per cycle being the share of the broker's that no
    /// change to the broker's own code removes; then the load generator's
    /// CPU per cycle through `leasehold_client::Client` against a bare
    /// generated client over a tonic Channel, on that same server (issue 18:
    /// the client at most 1.5x).
    Floor(floor::FloorArgs),
    /// The etcd store's design study: acquire+release cycles and renewals
    /// against one etcd with a lease per grant (as etcd's concurrency
    /// package) and with keys holding their own expiry: cycles/s, round
    /// trips, Raft writes (etcd's /metrics) and etcd CPU (/proc) per cycle
    /// and per renewed lease.
    EtcdMapping(etcd_mapping::EtcdMappingArgs),
    /// What one page of List costs at N held names (100 and 1000 names,
    /// from the start and the middle of the walk), and a whole walk in
    /// pages of 1000, in the broker and in the store; then the census's own
    /// duration at those names.
    List(list::ListArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The plain lock's `rediss://` connections ask rustls for the process's
    // provider, as the broker's do.
    leasehold_server::crypto::install();
    // One thread: a load generator shares the machine with what it
    // measures; the direct baseline opens a runtime of its own.
    // A floor server asked for more threads runs as the broker would.
    let mut builder = match &cli.command {
        Command::Floor(args) => match args.server_runtime_threads() {
            Some(threads) => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                if threads > 1 {
                    builder.worker_threads(threads);
                }
                builder
            }
            None => tokio::runtime::Builder::new_current_thread(),
        },
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("leasehold-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Keepalive(args) => keepalive::keepalive(args).await,
            Command::Soak(args) => soak::soak(args).await,
            Command::Cycles(args) => cycles::cycles(args).await,
            Command::Heartbeats(args) => heartbeats::heartbeats(args).await,
            Command::Waiters(args) => waiters::waiters(args).await,
            Command::Floor(args) => floor::floor(args).await,
            Command::EtcdMapping(args) => etcd_mapping::etcd_mapping(args).await,
            Command::List(args) => list::list(args).await,
        }
    })
}
