//! The Rust client: leases that keep themselves alive and say when they are
//! lost, before the application can act on a lease it no longer holds.
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold_client::{AcquireOptions, Client};
//!
//! # async fn write_report(_fence: u64) {}
//! # async fn example() -> Result<(), leasehold_client::ClientError> {
//! let client = Client::connect("http://127.0.0.1:7420").await?;
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait(Duration::from_secs(30));
//! let lease = client.acquire("jobs/nightly", opts).await?;
//! tokio::select! {
//!     // Hand the fence to the storage with every write.
//!     () = write_report(lease.fence()) => lease.release().await?,
//!     // Fires as soon as the lease is lost, or its deadline passes unrenewed.
//!     reason = lease.lost() => eprintln!("lock lost ({reason}); stopped writing"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A [`Client`] keeps one KeepAlive stream for all its leases, renewing each
//! every third of its TTL, reconnecting with backoff (to any of its brokers)
//! and resuming by owner token. Each lease's *local deadline* is computed
//! from the time the request was sent (see the proto's "Deadlines"), less a safety margin
//! (a tenth of the TTL by default), so latency, late timers and clock skew can
//! only make it end early; [`Lease::lost`] fires at that deadline if no
//! renewal confirmed the lease by then, even if the broker is unreachable.
//!
//! This crate depends on the API's definition (`leasehold-proto`), tonic's
//! client and tokio: using it compiles no part of the broker.

mod client;
mod election;
mod error;
pub mod fence;
mod keeper;
mod lease;
mod options;
mod session;
mod types;

pub(crate) use self::{client::Shared, lease::Held};
pub use self::{
    client::{Broker, Client, TTL_ADVICE_TARGET},
    election::{LeaderInfo, Observation},
    error::{ClientError, LossReason, Refusal},
    lease::Lease,
    options::{default_holder, AcquireOptions, ClientOptions, ClientTls, Credentials},
    types::{Description, Grant, ListPage, Listed, TtlAdvice},
};
