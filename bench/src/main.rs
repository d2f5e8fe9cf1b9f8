//! `leasehold-bench`: load generators for Leasehold, bounded in time,
//! printing the figures quoted in README.md and BENCHMARKS.md. Not part of
//! the shipped binary or image.
//!
//! They measure the broker through its public API (gRPC), against two
//! references on the same machine: Redis driven straight through the
//! broker's own store layer (`leasehold-server`'s `Store`, the same Lua
//! scripts: the floor no broker can beat), and etcd's lease and lock API
//! (its protos in `proto/etcd/`, compiled by this crate's build.rs).
//!
//! Brokers of the bench's own are `leasehold serve` child processes (their
//! CPU and memory are read from /proc): the `leasehold` binary beside this
//! one, or `$LEASEHOLD_BIN`.

mod broker;
mod cycles;
mod etcd;
mod heartbeats;
mod keepalive;
mod plain;
mod soak;
mod stats;
mod waiters;

use std::process::ExitCode;

use clap::Parser;

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
    Soak(crate::soak::SoakArgs),
    /// Acquire+release cycles through a broker and straight against Redis
    /// with the same scripts (the ratio), then one contended lock.
    Cycles(crate::cycles::CyclesArgs),
    /// N leases kept alive over S KeepAlive streams through a broker and
    /// renewed straight against Redis with the same batching: renewal
    /// latency, losses, CPU and memory of broker and Redis.
    Heartbeats(crate::heartbeats::HeartbeatsArgs),
    /// N callers waiting on one lock through a broker of the bench's own:
    /// Redis and broker CPU while they wait, then handoffs down the line
    /// (each grantee releases at once and queues again at the back):
    /// handoffs per second and handoff latency percentiles.
    Waiters(crate::waiters::WaitersArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One thread: a load generator shares the machine with what it
    // measures; the direct baseline opens a runtime of its own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
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
        }
    })
}
