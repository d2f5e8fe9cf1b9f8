//! The one error type of the broker.
//!
//! Every layer returns [`Error`], in the domain's words; it knows nothing of
//! gRPC. The server maps it to a status in one place (`service::status`), so
//! the code a client sees for a given failure is the same whichever RPC or
//! code path produced it (etcd's `toGRPCErrorMap`).

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting or request the broker cannot use, with no more to say
    /// than its message (a bad store URL, an unreadable file).
    #[error("{0}")]
    InvalidArgument(String),

    /// A request argument outside its limits. The message says so in the
    /// caller's words (a TTL, a wait, the lock name), never a proto field's;
    /// `argument` and `facts` say the same to programs (the status's
    /// `google.rpc.ErrorInfo`), so that a client can name its own parameter
    /// and read the limit without parsing the message.
    #[error("{message}")]
    BadArgument {
        /// For people.
        message: String,
        /// Which argument, in the API's neutral words: `name`, `ttl`,
        /// `wait`, `lock_delay`, `limit`, `holder`, `owner_token`, `place`,
        /// `tenant`, `request` (the proto's "Errors").
        argument: &'static str,
        /// What a program needs to fix it: the value sent and the limit,
        /// durations in milliseconds (`max_wait_ms`, `min_ttl_ms`...).
        facts: Vec<(&'static str, String)>,
    },

    /// Acquire did not obtain the lock: it is held by someone else.
    #[error(
        "lock '{name}' is held by {holder} (fence {fence}) for another {remaining_ms} ms; \
         waited {waited_ms} ms{hint}",
        holder = display_holder(holder),
        hint = if *waited_ms == 0 { "; set a wait to queue for it" } else { "" }
    )]
    Held {
        /// The lock name.
        name: String,
        /// The current holder's label.
        holder: String,
        /// The current holder's fence.
        fence: u64,
        /// Time left on the current lease.
        remaining_ms: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Acquire did not obtain the lock: it is in its lock-delay after its
    /// previous holder lost it.
    #[error(
        "lock '{name}' is in its lock-delay for another {remaining_ms} ms: its previous lease \
         (fence {fence}) ended without a release; waited {waited_ms} ms"
    )]
    LockDelay {
        /// The lock name.
        name: String,
        /// The fence of the lease that was lost.
        fence: u64,
        /// Time until the delay ends.
        remaining_ms: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Acquire did not obtain the lock: it is free, but callers queued
    /// earlier come first.
    #[error(
        "lock '{name}' has {queued} callers waiting for it in line, who come first; \
         waited {waited_ms} ms{hint}",
        hint = if *waited_ms == 0 { "; set a wait to join the line" } else { "" }
    )]
    Queued {
        /// The lock name.
        name: String,
        /// The queue's length.
        queued: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Acquire's wait ran out without the lock (`refusal`: held, in its
    /// lock-delay or queued), and the caller asked to keep its place in
    /// line (keep_place): the place stays in line for `kept_ms` (the
    /// store's place lifetime) so that the caller's next Acquire, passing it
    /// back, waits on in the same position. The status carries the place in
    /// its metadata, never in the message (which a client may log).
    #[error(
        "{refusal}; your place in line is kept for {kept_ms} ms: acquire again with it to \
         wait on in it"
    )]
    PlaceKept {
        /// Why the wait ended without the lock.
        refusal: Box<Error>,
        /// The place kept (the token it waited with).
        place: KeptPlace,
        /// How long the place stays in line untaken.
        kept_ms: u64,
    },

    /// Renew or release of a lease that an operator revoked.
    #[error("the lease on '{name}' (fence {fence}) was revoked by an operator")]
    Revoked {
        /// The lock name.
        name: String,
        /// The revoked lease's fence.
        fence: u64,
    },

    /// The request carries no credential this broker accepts; the message
    /// says what it expects (never what was sent).
    #[error("{0}")]
    Unauthenticated(String),

    /// The operation is not allowed on this broker, or not to this
    /// credential; the message says why.
    #[error("{0}")]
    PermissionDenied(String),

    /// Renew or release of a lease that no longer exists.
    #[error(
        "no lease on '{name}': it expired, was released, or the store lost it; \
         acquire it again (and do not trust writes made after its deadline)"
    )]
    NotHeld {
        /// The lock name.
        name: String,
    },

    /// Renew or release with an owner token that is not the current holder's.
    #[error(
        "the lease on '{name}' belongs to another owner (current fence {fence}): \
         your lease ended and the lock was granted again"
    )]
    NotOwner {
        /// The lock name.
        name: String,
        /// The current holder's fence.
        fence: u64,
    },

    /// A configured capacity limit was reached; the message names it.
    #[error("{message}")]
    ResourceExhausted {
        /// For people: the cap, its flag and what to do.
        message: String,
        /// The cap's flag, without its dashes (`max-waiters`,
        /// `tenant-max-leases`...).
        limit: String,
        /// When a retry may succeed, if known (a rate cap).
        retry_after: Option<std::time::Duration>,
    },

    /// The store did not answer in time, or the broker is shutting down.
    /// Safe to retry, on any replica.
    #[error("{0}")]
    Unavailable(String),

    /// The caller went away before the call finished, or cancelled its
    /// request on a Session stream.
    #[error("the call was cancelled by the client")]
    Cancelled,

    /// A request on a Session stream ran past the `timeout_ms` it gave.
    #[error(
        "the request ran past its own timeout ({timeout_ms} ms) and was ended; \
         an acquire gave up its place, a renewal or release may or may not have happened"
    )]
    DeadlineExceeded {
        /// The request's own timeout.
        timeout_ms: u64,
    },

    /// A bug or an unexpected answer from the store.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether this answer to a Renew or Release says for sure that the
    /// token's lease is over (gone, another owner's, revoked), as opposed
    /// to a failure that leaves its fate unknown (no answer from the store)
    /// or a refusal before anything was asked of it.
    pub fn settles_the_lease(&self) -> bool {
        matches!(
            self,
            Error::NotHeld { .. } | Error::NotOwner { .. } | Error::Revoked { .. }
        )
    }
}

impl Error {
    /// An argument outside its limits (see [`Error::BadArgument`]).
    pub fn bad(
        argument: &'static str,
        message: impl Into<String>,
        facts: Vec<(&'static str, String)>,
    ) -> Error {
        Error::BadArgument {
            message: message.into(),
            argument,
            facts,
        }
    }

    /// A cap reached (see [`Error::ResourceExhausted`]); `flag` is the
    /// cap's flag, with or without its dashes.
    pub fn exhausted(flag: &str, message: impl Into<String>) -> Error {
        Error::ResourceExhausted {
            message: message.into(),
            limit: flag.trim_start_matches('-').to_owned(),
            retry_after: None,
        }
    }
}

fn display_holder(holder: &str) -> String {
    if holder.is_empty() {
        "an unnamed holder".to_owned()
    } else {
        format!("'{holder}'")
    }
}

/// A place in a name's wait line, kept for its caller: a secret like an
/// owner token (granted, it becomes one), so its `Debug` shows only a
/// prefix.
pub struct KeptPlace(pub String);

impl std::fmt::Debug for KeptPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&crate::redact::Redacted(&self.0), f)
    }
}
