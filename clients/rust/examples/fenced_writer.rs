//! A lock holder whose writes carry its fence: the holder of the GC-pause
//! story (tests/gc_pause.rs runs it, and pauses it with SIGSTOP).
//!
//! ```sh
//! cargo run -p leasehold-client --features postgres --example fenced_writer -- \
//!     http://127.0.0.1:7420 postgres://postgres@127.0.0.1/postgres reports 2000
//! ```
//!
//! Arguments: the broker's URL, PostgreSQL's URL (`-` for none: `send`
//! only), the table (`id text PRIMARY KEY, body text`, with the fence
//! column of `fence::migration`) and the lease's TTL in milliseconds. It
//! takes the lock `gc-pause/<table>`, prints `fence <fence>`, then runs
//! the commands it reads on stdin, one a line:
//!
//! - `write <id> <body>`: a guarded update of row `<id>`;
//! - `upsert <id> <body>`: a guarded upsert of row `<id>`;
//! - `send <message>`: a side effect that stores nothing, checked with
//!   CheckFence right before it is made.
//!
//! Each command is done as a careful holder does it: it checks its lease
//! first (printing `lost <reason>` and skipping the command if it is lost),
//! prints `checked`, and then waits for one more line (`go`) before it
//! writes: the moment between the check and the write, where the pause of
//! the story falls. Outcomes: `written`, `sent <message>`, `stale <fence>`
//! (the storage or the broker refused the fence), `no-row <fence>`.
//! End of input releases the lock.

use std::time::Duration;

use leasehold_client::{
    fence::{guarded_update, guarded_upsert, FenceError, Write},
    AcquireOptions, Client,
};
use tokio::sync::mpsc;

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Lines of stdin, read on a thread of their own (a blocking read).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A connection to PostgreSQL, its connection task spawned.
async fn connect(url: &str) -> Result<tokio_postgres::Client, Failure> {
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("fenced_writer: the PostgreSQL connection ended: {e}");
        }
    });
    Ok(db)
}

/// What a guarded write's outcome prints.
fn report(outcome: Result<(), FenceError>) -> Result<String, Failure> {
    match outcome {
        Ok(()) => Ok("written".into()),
        Err(FenceError::Stale { fence }) => Ok(format!("stale {fence}")),
        Err(FenceError::NoRow { fence }) => Ok(format!("no-row {fence}")),
        Err(e) => Err(e.into()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Failure> {
    run(std::env::args().skip(1).collect()).await
}

/// The program, given its arguments (tests/gc_pause.rs runs it from its
/// own binary, as a process of its own).
pub async fn run(args: Vec<String>) -> Result<(), Failure> {
    let [broker, database, table, ttl_ms] = args.as_slice() else {
        return Err(
            "usage: fenced_writer <broker URL> <PostgreSQL URL or -> <table> <TTL ms>".into(),
        );
    };
    let ttl = Duration::from_millis(ttl_ms.parse()?);
    let client = Client::connect(broker.as_str()).await?;
    let name = format!("gc-pause/{table}");
    let lease = client
        .acquire(&name, AcquireOptions::new().ttl(ttl))
        .await?;
    let fence = lease.fence();
    println!("fence {fence}");

    let db = match database.as_str() {
        "-" => None,
        url => Some(connect(url).await?),
    };
    let mut lines = stdin_lines();
    while let Some(line) = lines.recv().await {
        let mut words = line.splitn(3, ' ');
        let command = words.next().unwrap_or_default();
        if let Err(reason) = lease.check() {
            println!("lost {}", reason.as_str());
            continue;
        }
        println!("checked");
        // The pause of the story falls here: between the check and the
        // side effect, however short the code between them.
        if lines.recv().await.is_none() {
            break;
        }
        let outcome = match command {
            "write" | "upsert" => {
                let (Some(id), Some(body)) = (words.next(), words.next()) else {
                    return Err(format!("`{line}`: expected `{command} <id> <body>`").into());
                };
                let db = db.as_ref().ok_or("no PostgreSQL URL was given")?;
                let write = Write::new(table, "id", &id).set("body", &body);
                if command == "write" {
                    report(guarded_update(db, &write, fence).await)?
                } else {
                    report(guarded_upsert(db, &write, fence).await)?
                }
            }
            "send" => {
                let message = words.collect::<Vec<_>>().join(" ");
                // A message cannot carry a fence to storage that checks
                // it: ask the broker whether this fence is still the
                // current one, right before sending.
                let (current, now) = client.check_fence(&name, fence).await?;
                if current {
                    format!("sent {message}")
                } else {
                    eprintln!("fenced_writer: fence {fence} is stale (the lock's is {now})");
                    format!("stale {fence}")
                }
            }
            other => return Err(format!("unknown command `{other}`").into()),
        };
        println!("{outcome}");
    }
    if !lease.is_lost() {
        lease.release().await?;
    }
    Ok(())
}
