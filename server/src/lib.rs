//! The Leasehold broker as a library: named leases with owner tokens and
//! fencing tokens, served over gRPC, stored in Redis (one server, Sentinel
//! or Cluster), in PostgreSQL or in memory. The
//! `leasehold` binary (`serve` and the client commands) and the tests build
//! on it; a Rust application that wants a client depends on
//! `leasehold-client` instead, which compiles none of this.
//!
//! See `proto/leasehold/v1/leasehold.proto` for the API and its guarantees,
//! `README.md` for running it, and `docs/architecture.md` for the layers
//! below and the paths a call takes through them.
//!
//! # Layout
//!
//! * [`auth`]: the `--auth-file`: bearer tokens (hashed) and client
//!   certificate names mapped to tenants and permissions.
//! * [`config`]: flags and environment variables, request limits.
//! * [`error`]: the one error type, in the domain's words (mapped to gRPC
//!   statuses in one place, `service::status`).
//! * [`lease`]: the lease rules: validation, grants (once or waiting),
//!   renewals, releases, owner tokens, tenants (namespaces, permissions,
//!   caps). Knows nothing of gRPC or Prometheus: it reports what happens
//!   through its `Events` trait, and returns [`Error`], which the server maps
//!   to statuses (`service::status`).
//! * [`store`]: atomic lease operations and release notifications, in
//!   memory, in Redis (Lua scripts in `src/store/lua/`; one server,
//!   Sentinel or Cluster) or in PostgreSQL (PL/pgSQL functions in
//!   `src/store/postgres/schema.sql`); one contract, checked by
//!   `tests/conformance.rs` on each ([`store::SCHEMES`]: the `--store`
//!   values that open them).
//! * [`metrics`]: Prometheus metrics: the lease rules' events counted, and
//!   the server's own.
//! * [`service`]: the tonic services (thin), the gate that turns credentials
//!   into a caller, connections (TLS, limits), health, reflection,
//!   `/metrics`.
//! * [`shutdown`]: signal handling.
//! * [`proto`]: the API (the `leasehold-proto` crate).
//! * [`redact`]: what never reaches a log whole (tokens, store passwords).
//! * [`duration`]: durations as people write them (flags, messages).

#![warn(missing_docs)]

pub mod auth;
pub mod config;
pub mod crypto;
pub mod duration;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod lease;
pub mod metrics;
pub mod proto;
pub mod redact;
pub mod service;
pub mod shutdown;
pub mod store;

pub use error::{Error, Result};
