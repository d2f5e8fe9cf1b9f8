//! Takes a lock, does a piece of work that carries the lease's fence, and
//! releases the lock; stops at once if the lease is lost meanwhile.
//!
//! ```sh
//! cargo run --release -- serve &          # a broker on 127.0.0.1:7420
//! cargo run -p leasehold-client --example hold -- jobs/nightly
//! ```

use std::time::Duration;

use leasehold_client::{AcquireOptions, Client, ClientError};

/// The work the lock protects: every write it makes carries the fence, so
/// the storage can refuse a writer whose lease was taken over.
async fn write_report(fence: u64) {
    println!("writing with fence {fence}");
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "jobs/nightly".into());
    let url = std::env::var("LEASEHOLD_BROKER").unwrap_or_else(|_| "http://127.0.0.1:7420".into());
    let client = Client::connect(url).await?;
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30));
    let lease = client.acquire(&name, options).await?;
    println!("holding {} (fence {})", lease.name(), lease.fence());
    tokio::select! {
        () = write_report(lease.fence()) => lease.release().await?,
        reason = lease.lost() => eprintln!("lock lost ({reason}): stopped writing"),
    }
    Ok(())
}
