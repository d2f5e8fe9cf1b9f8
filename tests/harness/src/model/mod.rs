//! The model checker of the lease contract: an executable specification of
//! what a name promises ([`spec`]), the history of a run against real
//! brokers and stores ([`history`]: every call with its invocation and
//! completion times and its answer, or the fact that no answer came), a
//! search that decides whether that history could have happened on the
//! specification ([`linear`]: Wing and Gong's linearizability search, per
//! name), the random clients that make such histories ([`workload`]) and the
//! faults injected meanwhile ([`nemesis`]).
//!
//! Why a model and not more scenarios: the scenarios of `history::check`
//! assert the properties their authors thought of, one lock and one fault
//! at a time; the model states the whole contract once, and random
//! operations under random faults ask it questions nobody listed. Where the
//! model and a store disagree, one of them is wrong: the model is written
//! from the proto's and docs/guarantees.md's promises, never from a store's code.
//!
//! Time is part of the contract (a lease expires at its TTL), so the model
//! is not the usual deterministic state machine: every instant it knows is
//! a [`spec::Span`], the interval in which that instant must lie (a lease
//! granted by a call that took from `a` to `b` expires between `a + ttl`
//! and `b + ttl`), and a step whose answer depends on an uncertain instant
//! (was that lease still alive?) branches, each branch narrowing the span.
//! Calls that got no answer (UNAVAILABLE, a deadline, a killed broker) are
//! folded in as "may have happened at any moment of a bounded window": a
//! lease that may or may not exist is one that may have ended at any time.
//!
//! `tests/model_check.rs` runs it on every store; `scripts/model-check`
//! is its command.

pub mod history;
pub mod linear;
pub mod nemesis;
pub mod rng;
pub mod spec;
pub mod workload;
