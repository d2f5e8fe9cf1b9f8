//! Leasehold: a distributed lock broker. Named leases with owner tokens and
//! fencing tokens, served over gRPC, stored in Redis (or in memory).
//!
//! See `proto/leasehold/v1/leasehold.proto` for the API and its guarantees,
//! and `README.md` for running it.
//!
//! # Layout
//!
//! * [`auth`]: the `--auth-file`: bearer tokens (hashed) and client
//!   certificate names mapped to tenants and permissions.
//! * [`config`]: flags and environment variables, request limits.
//! * [`error`]: the one error type and its mapping to gRPC status codes.
//! * [`lease`]: the lease rules: validation, grants (once or waiting),
//!   renewals, releases, owner tokens, tenants (namespaces, permissions,
//!   caps). Knows nothing of gRPC or Prometheus: it reports what happens
//!   through its `Events` trait, and returns [`Error`], which the server maps
//!   to statuses (`server::status`).
//! * [`store`]: atomic lease operations and release notifications, in Redis
//!   (Lua scripts in `src/store/lua/`; one server, Sentinel or Cluster) or
//!   in memory; one contract.
//! * [`cli`]: the client commands of the binary (`acquire`, `release`,
//!   `describe`, `hold`, `run`).
//! * [`client`]: the Rust client: leases that keep themselves alive over one
//!   KeepAlive stream and signal their loss.
//! * [`metrics`]: Prometheus metrics: the lease rules' events counted, and
//!   the server's own.
//! * [`server`]: the tonic services (thin), the gate that turns credentials
//!   into a caller, connections (TLS, limits), health, reflection,
//!   `/metrics`.
//! * [`shutdown`]: signal handling.
//! * [`proto`]: the API (the `leasehold-proto` crate) and etcd's.
//! * [`redact`]: what never reaches a log whole (tokens, store passwords).

#![warn(missing_docs)]

pub mod auth;
pub mod cli;
pub mod config;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod lease;
pub mod metrics;
pub mod proto;
pub mod redact;
pub mod server;
pub mod shutdown;
pub mod store;

pub use error::{Error, Result};
/// The Rust client (the `leasehold-client` crate), which the CLI uses.
pub use leasehold_client as client;
