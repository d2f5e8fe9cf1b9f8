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

mod keeper;

use std::{
    collections::HashMap,
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use tokio::{
    sync::{watch, Notify},
    time::{sleep_until, Instant},
};
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::interceptor::InterceptedService,
    transport::Channel,
    Code,
};

use leasehold_proto::{
    leasehold_client::LeaseholdClient, AcquireRequest, CheckFenceRequest, DescribeRequest,
    DescribeResponse, LeaderRequest, ReleaseRequest, RevokeRequest,
};

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The broker found the lease expired.
    Expired,
    /// The lease expired and the lock was granted to someone else.
    NotOwner,
    /// The store lost the lease (restarted empty, flushed).
    StoreLost,
    /// An operator revoked the lease.
    Revoked,
    /// No renewal confirmed the lease before its local deadline (the broker
    /// was unreachable, or the process was paused).
    DeadlinePassed,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "expired",
            LossReason::NotOwner => "granted to another owner",
            LossReason::StoreLost => "lost by the store",
            LossReason::Revoked => "revoked",
            LossReason::DeadlinePassed => "deadline passed without a confirmed renewal",
        })
    }
}

/// What can go wrong in the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The broker URL is malformed, or no connection could be made.
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    /// The lock is held by someone else (and any wait ran out).
    #[error("{0}")]
    NotAcquired(String),
    /// The lease was already lost.
    #[error("the lease was lost: {0}")]
    Lost(LossReason),
    /// The broker refused the call.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(tonic::Status),
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            Code::Aborted => ClientError::NotAcquired(status.message().to_owned()),
            _ => ClientError::Status(status),
        }
    }
}

/// How to acquire.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    ttl: Duration,
    wait: Duration,
    holder: String,
    margin: Option<Duration>,
    lock_delay: Duration,
    limit: u32,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl AcquireOptions {
    /// TTL 10 s, no wait, holder `hostname:pid`, safety margin a tenth of
    /// the TTL.
    pub fn new() -> Self {
        AcquireOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::ZERO,
            holder: default_holder(),
            margin: None,
            lock_delay: Duration::ZERO,
            limit: 1,
        }
    }

    /// Make the name a semaphore: up to `limit` leases at once (each with
    /// its own token and fence). Every caller of the name must agree on it.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Lock-delay: if this lease ends involuntarily (expiry, revoke), nobody
    /// gets the lock for this long afterwards. Default: none.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// How long before the computed deadline the lease counts as lost:
    /// time for the application to stop writing (and for timers firing late)
    /// before the broker could expire the lease. Default: a tenth of the TTL.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// The lease TTL (renewed every third of it).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long to wait if the lock is held (0: try once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The label shown to others by Describe.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }
}

/// `hostname:pid`, so an operator can find the holder.
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("{host}:{}", std::process::id())
}

/// A lease as the keeper tracks it.
pub(crate) struct Held {
    pub(crate) name: String,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) ttl: Duration,
    /// Subtracted from every deadline (see `AcquireOptions::safety_margin`).
    pub(crate) margin: Duration,
    /// The local deadline; only moves forward.
    pub(crate) deadline: watch::Sender<Instant>,
    /// Set once, when the lease is lost.
    pub(crate) lost: watch::Sender<Option<LossReason>>,
}

impl Held {
    /// Records a renewal confirmed for a heartbeat sent at `sent`. A lease
    /// whose deadline already passed stays lost: the application may have
    /// seen it lost, and must not see it come back.
    pub(crate) fn renewed(&self, sent: Instant, ttl_ms: u64) {
        if self.loss().is_some() {
            return;
        }
        let deadline = (sent + Duration::from_millis(ttl_ms))
            .checked_sub(self.margin)
            .unwrap_or(sent);
        self.deadline.send_if_modified(|d| {
            let later = deadline > *d;
            if later {
                *d = deadline;
            }
            later
        });
    }

    /// Marks the lease lost (the first reason wins).
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        self.lost.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(reason);
            }
            first
        });
    }

    /// The loss reason, if lost, counting a passed deadline as a loss.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        if let Some(reason) = *self.lost.borrow() {
            return Some(reason);
        }
        if Instant::now() >= *self.deadline.borrow() {
            self.mark_lost(LossReason::DeadlinePassed);
            return Some(LossReason::DeadlinePassed);
        }
        None
    }
}

/// State shared by a client, its leases and its keeper task.
pub(crate) struct Shared {
    /// One channel per broker replica, in the order given.
    brokers: Vec<Broker>,
    /// The replica calls go to; moves on when it cannot be reached.
    current: AtomicUsize,
    /// Live leases by owner token (a client may hold several permits of one
    /// semaphore). A std mutex: held for map operations only, never
    /// across an await.
    pub(crate) leases: Mutex<HashMap<String, Arc<Held>>>,
    /// Wakes the keeper when a lease is added.
    pub(crate) added: Notify,
}

impl Shared {
    /// The current replica: its index (for [`Shared::unreachable`]) and a
    /// client for it.
    pub(crate) fn broker(&self) -> (usize, Broker) {
        let index = self.current.load(Ordering::Relaxed);
        (index, self.brokers[index % self.brokers.len()].clone())
    }

    /// The replica at `index` could not be reached: move on to the next
    /// (unless another caller already did).
    pub(crate) fn unreachable(&self, index: usize) {
        let _ = self.current.compare_exchange(
            index,
            index.wrapping_add(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Runs a unary call on the current replica, moving on to the next while
    /// replicas cannot be reached. Only a failure to connect moves on: the
    /// request never left this process, so sending it elsewhere cannot apply
    /// it twice.
    pub(crate) async fn call<T, F, Fut>(&self, mut call: F) -> Result<T, tonic::Status>
    where
        F: FnMut(Broker) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let mut attempts = self.brokers.len();
        loop {
            let (index, broker) = self.broker();
            match call(broker).await {
                Err(status) if attempts > 1 && not_connected(&status) => {
                    self.unreachable(index);
                    attempts -= 1;
                }
                result => return result,
            }
        }
    }

    /// The leases to keep alive. A panic elsewhere while the lock was held
    /// (poisoning it) leaves the map whole (every change is one insert or
    /// remove), so the leases are still kept, never silently dropped.
    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Held>>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn snapshot(&self) -> Vec<Arc<Held>> {
        self.leases().values().cloned().collect()
    }

    /// Removes `held` from the leases to keep alive.
    pub(crate) fn forget(&self, held: &Arc<Held>) {
        let mut leases = self.leases();
        if leases
            .get(&held.token)
            .is_some_and(|h| Arc::ptr_eq(h, held))
        {
            leases.remove(&held.token);
        }
    }
}

/// A gRPC client of one broker, sending the client's credentials with
/// every call.
pub type Broker = LeaseholdClient<InterceptedService<Channel, Credentials>>;

/// The credentials sent with every call: a bearer token, for brokers with
/// an `--auth-file`. (A client certificate is part of [`ClientTls`].)
#[derive(Clone, Default)]
pub struct Credentials {
    bearer: Option<MetadataValue<Ascii>>,
}

impl Credentials {
    /// Sends `authorization: Bearer <token>` (`None`: no token).
    pub fn bearer(token: Option<&str>) -> Result<Self, ClientError> {
        let bearer = token
            .map(|t| {
                let mut value =
                    MetadataValue::try_from(format!("Bearer {}", t.trim())).map_err(|_| {
                        ClientError::Connect(
                            "the bearer token has characters a header cannot carry".into(),
                        )
                    })?;
                // HPACK never-indexed: kept out of header tables and logs.
                value.set_sensitive(true);
                Ok::<_, ClientError>(value)
            })
            .transpose()?;
        Ok(Credentials { bearer })
    }

    /// A client of `channel` sending these credentials.
    pub fn client(&self, channel: Channel) -> Broker {
        LeaseholdClient::with_interceptor(channel, self.clone())
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(bearer) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
        }
        Ok(request)
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Credentials")
            .field("bearer", &self.bearer.is_some())
            .finish()
    }
}

/// How a [`Client`] connects: TLS for `https://` brokers, and a bearer
/// token for brokers that require one.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// TLS settings (`None`: the system's roots, no client certificate).
    pub tls: Option<ClientTls>,
    /// The credentials sent with every call.
    pub credentials: Credentials,
}

/// TLS settings for `https://` brokers.
#[derive(Clone, Default)]
pub struct ClientTls {
    /// CA certificates (PEM) the broker's certificate must chain to;
    /// `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate and its key (PEM), for a broker with mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// tonic's TLS configuration for these settings.
    pub fn config(tls: Option<&ClientTls>) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new();
        match tls.and_then(|t| t.ca_pem.as_ref()) {
            Some(ca) => config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca)),
            None => config = config.with_native_roots(),
        }
        if let Some((cert, key)) = tls.and_then(|t| t.identity.as_ref()) {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// A connection to the broker (or to several replicas); cheap to clone.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl Client {
    /// Connects to one broker, e.g. `http://127.0.0.1:7420`.
    pub async fn connect(url: impl Into<String>) -> Result<Client, ClientError> {
        Self::connect_any([url.into()]).await
    }

    /// Connects to several broker replicas: calls and the KeepAlive stream go
    /// to one of them and move to the next when it cannot be reached. Fails
    /// only if none can be reached now.
    pub async fn connect_any(
        urls: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Client, ClientError> {
        Self::connect_any_with(urls, &ClientOptions::default()).await
    }

    /// [`Client::connect_any`], with TLS settings for `https://` brokers and
    /// credentials.
    pub async fn connect_any_with(
        urls: impl IntoIterator<Item = impl Into<String>>,
        options: &ClientOptions,
    ) -> Result<Client, ClientError> {
        let tls = options.tls.as_ref();
        let mut endpoints = Vec::new();
        for url in urls {
            let url = url.into();
            let endpoint = Channel::from_shared(url.clone())
                .map_err(|e| ClientError::Connect(format!("bad broker URL '{url}': {e}")))?;
            let endpoint = match url.starts_with("https://") {
                true => endpoint
                    .tls_config(ClientTls::config(tls))
                    .map_err(|e| ClientError::Connect(format!("TLS settings for '{url}': {e}")))?,
                false => endpoint,
            };
            let endpoint = endpoint
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true)
                .initial_stream_window_size(Some(1 << 20))
                .initial_connection_window_size(Some(4 << 20))
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5));
            endpoints.push(endpoint);
        }
        if endpoints.is_empty() {
            return Err(ClientError::Connect("no broker URL given".into()));
        }
        // Start with the first replica that answers; the others connect
        // when they are needed.
        let mut first = None;
        let mut errors = Vec::new();
        for (index, endpoint) in endpoints.iter().enumerate() {
            match endpoint.connect().await {
                Ok(channel) => {
                    first = Some((index, channel));
                    break;
                }
                Err(e) => errors.push(format!("{}: {e}: {}", endpoint.uri(), source_chain(&e))),
            }
        }
        let Some((current, channel)) = first else {
            return Err(ClientError::Connect(errors.join("; ")));
        };
        let brokers = endpoints
            .iter()
            .enumerate()
            .map(|(index, endpoint)| {
                options.credentials.client(if index == current {
                    channel.clone()
                } else {
                    endpoint.connect_lazy()
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            brokers,
            current: AtomicUsize::new(current),
            leases: Mutex::new(HashMap::new()),
            added: Notify::new(),
        });
        tokio::spawn(keeper::run(Arc::downgrade(&shared)));
        Ok(Client { shared })
    }

    /// Takes the lease on `name`; it keeps itself alive until released,
    /// dropped or lost.
    pub async fn acquire(&self, name: &str, opts: AcquireOptions) -> Result<Lease, ClientError> {
        let sent = Instant::now();
        let margin = opts.margin;
        let (lease, waited_ms) = self.grant_waited(name, opts).await?;
        Ok(self.keep(lease, sent, waited_ms, margin))
    }

    /// Takes the lease on `name` *without* keeping it alive: it expires at
    /// its TTL unless the caller renews or releases it by its owner token
    /// (what a shell script does with `leasehold acquire` and `leasehold
    /// release`). Prefer [`Client::acquire`] in a program.
    pub async fn grant(
        &self,
        name: &str,
        opts: AcquireOptions,
    ) -> Result<leasehold_proto::Lease, ClientError> {
        Ok(self.grant_waited(name, opts).await?.0)
    }

    /// The Acquire call: the lease and how long the broker made it wait.
    async fn grant_waited(
        &self,
        name: &str,
        opts: AcquireOptions,
    ) -> Result<(leasehold_proto::Lease, u64), ClientError> {
        let request = AcquireRequest {
            name: name.to_owned(),
            ttl_ms: opts.ttl.as_millis() as u64,
            holder: opts.holder,
            wait_timeout_ms: opts.wait.as_millis() as u64,
            lock_delay_ms: opts.lock_delay.as_millis() as u64,
            limit: opts.limit,
        };
        let response = self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.acquire(request).await }
            })
            .await?
            .into_inner();
        let lease = response
            .lease
            .ok_or_else(|| ClientError::Status(tonic::Status::internal("grant without a lease")))?;
        Ok((lease, response.waited_ms))
    }

    /// Keeps `lease`, granted to a request sent at `sent` after
    /// `waited_ms` of waiting, alive from now on.
    fn keep(
        &self,
        lease: leasehold_proto::Lease,
        sent: Instant,
        waited_ms: u64,
        margin: Option<Duration>,
    ) -> Lease {
        // The grant happened no sooner than `waited_ms` after we sent.
        let granted_no_sooner_than = sent + Duration::from_millis(waited_ms);
        let ttl = Duration::from_millis(lease.ttl_ms);
        let margin = margin.unwrap_or(ttl / 10).min(ttl);
        let deadline = (granted_no_sooner_than + ttl)
            .checked_sub(margin)
            .unwrap_or(granted_no_sooner_than);
        let held = Arc::new(Held {
            name: lease.name,
            token: lease.owner_token,
            fence: lease.fence,
            ttl,
            margin,
            deadline: watch::Sender::new(deadline),
            lost: watch::Sender::new(None),
        });
        self.shared
            .leases()
            .insert(held.token.clone(), Arc::clone(&held));
        self.shared.added.notify_one();
        Lease {
            held,
            shared: Arc::clone(&self.shared),
            done: false,
        }
    }

    /// Who holds `name` (no owner token).
    pub async fn describe(&self, name: &str) -> Result<DescribeResponse, ClientError> {
        self.describe_in("", name).await
    }

    /// Who holds `name` in `tenant`'s namespace (empty: the caller's own;
    /// another's needs the `admin` permission).
    pub async fn describe_in(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<DescribeResponse, ClientError> {
        let request = DescribeRequest {
            name: name.to_owned(),
            tenant: tenant.to_owned(),
        };
        Ok(self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.describe(request).await }
            })
            .await?
            .into_inner())
    }

    /// Waits (up to `opts.wait`) to become the leader of `election` with
    /// `value`. The lease returned is the leadership: kept alive like any
    /// lease, its fence is the leader's term; release it to resign.
    pub async fn campaign(
        &self,
        election: &str,
        value: &str,
        opts: AcquireOptions,
    ) -> Result<Lease, ClientError> {
        // An election is a lock whose holder label is the leader's value.
        self.acquire(election, opts.holder(value)).await
    }

    /// The current leader of `election`, if any.
    pub async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>, ClientError> {
        let request = LeaderRequest {
            election: election.to_owned(),
        };
        let r = self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.leader(request).await }
            })
            .await?
            .into_inner();
        Ok(LeaderInfo::from_message(r))
    }

    /// Follows the leadership of `election`: the first item is the
    /// leadership now, then every change in order.
    pub async fn observe(&self, election: &str) -> Result<Observation, ClientError> {
        let request = LeaderRequest {
            election: election.to_owned(),
        };
        let stream = self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.observe(request).await }
            })
            .await?
            .into_inner();
        Ok(Observation { stream })
    }

    /// Whether `fence` is the fence of the current lease on `name`, and the
    /// current fence (0 if free).
    pub async fn check_fence(&self, name: &str, fence: u64) -> Result<(bool, u64), ClientError> {
        let request = CheckFenceRequest {
            name: name.to_owned(),
            fence,
        };
        let r = self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.check_fence(request).await }
            })
            .await?
            .into_inner();
        Ok((r.current, r.current_fence))
    }

    /// Ends the current lease on `name`, whoever holds it (the caller needs
    /// the `admin` permission; without authentication the broker must run
    /// with `--enable-revoke`). Returns the revoked lease's fence.
    pub async fn revoke(&self, name: &str) -> Result<u64, ClientError> {
        self.revoke_in("", name).await
    }

    /// [`Client::revoke`] of `name` in `tenant`'s namespace (empty: the
    /// caller's own).
    pub async fn revoke_in(&self, tenant: &str, name: &str) -> Result<u64, ClientError> {
        let request = RevokeRequest {
            name: name.to_owned(),
            tenant: tenant.to_owned(),
        };
        Ok(self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.revoke(request).await }
            })
            .await?
            .into_inner()
            .fence)
    }

    /// Releases a lease known only by its name and token (e.g. taken by
    /// another process).
    pub async fn release_token(&self, name: &str, owner_token: &str) -> Result<(), ClientError> {
        release(&self.shared, name, owner_token).await
    }
}

/// Releases, retrying a call whose connection broke (the request may have
/// reached the broker, and its answer not us): Release is idempotent, so a
/// retry whose first try did the work reports success too.
async fn release(shared: &Shared, name: &str, owner_token: &str) -> Result<(), ClientError> {
    let request = ReleaseRequest {
        name: name.to_owned(),
        owner_token: owner_token.to_owned(),
    };
    let mut pause = RELEASE_RETRY;
    for tries_left in (0..RELEASE_TRIES).rev() {
        let answer = shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.release(request).await }
            })
            .await;
        match &answer {
            Err(s) if tries_left > 0 && broken(s) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            _ => return release_outcome(answer),
        }
    }
    unreachable!("the last try returns its answer")
}

/// Tries of a release whose connection breaks, and the first pause.
const RELEASE_TRIES: u32 = 3;
const RELEASE_RETRY: Duration = Duration::from_millis(100);

/// A call that failed in transit: the broker may or may not have done it.
fn broken(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::Unknown)
}

fn release_outcome(
    answer: Result<tonic::Response<leasehold_proto::ReleaseResponse>, tonic::Status>,
) -> Result<(), ClientError> {
    match answer {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Err(ClientError::Lost(LossReason::Expired)),
        Err(s) if s.code() == Code::FailedPrecondition => {
            Err(ClientError::Lost(LossReason::NotOwner))
        }
        Err(s) => Err(s.into()),
    }
}

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The value it campaigned with.
    pub value: String,
    /// Its term (its lease's fence).
    pub term: u64,
}

impl LeaderInfo {
    fn from_message(r: leasehold_proto::LeaderResponse) -> Option<Self> {
        r.present.then_some(LeaderInfo {
            value: r.value,
            term: r.term,
        })
    }
}

/// The changes of an election's leadership (see [`Client::observe`]).
pub struct Observation {
    stream: tonic::Streaming<leasehold_proto::LeaderResponse>,
}

impl Observation {
    /// The next leadership (`None` inside: no leader); `None` when the
    /// stream ended (the broker shut down: observe again).
    pub async fn next(&mut self) -> Option<Result<Option<LeaderInfo>, ClientError>> {
        match self.stream.message().await {
            Ok(Some(r)) => Some(Ok(LeaderInfo::from_message(r))),
            Ok(None) => None,
            Err(status) => Some(Err(status.into())),
        }
    }
}

/// A held lease. Kept alive in the background; released by
/// [`release`](Lease::release) or, best effort, when dropped.
pub struct Lease {
    held: Arc<Held>,
    shared: Arc<Shared>,
    done: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.held.name)
            .field("fence", &self.held.fence)
            .field("owner_token", &redacted(&self.held.token))
            .finish()
    }
}

impl Lease {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The fencing token: attach it to every write made under this lease.
    pub fn fence(&self) -> u64 {
        self.held.fence
    }

    /// The owner token (a secret: do not log it).
    pub fn owner_token(&self) -> &str {
        &self.held.token
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.held.ttl
    }

    /// The local deadline: the lease is valid at least until then (it is
    /// computed from send times, less the safety margin), unless the broker
    /// says it is lost. Moves forward with each renewal.
    pub fn deadline(&self) -> Instant {
        *self.held.deadline.borrow()
    }

    /// Whether the lease is lost (or its deadline passed), checked now.
    pub fn is_lost(&self) -> bool {
        self.held.loss().is_some()
    }

    /// `Err(reason)` if the lease is lost: call it before each write.
    pub fn check(&self) -> Result<(), LossReason> {
        self.held.loss().map_or(Ok(()), Err)
    }

    /// Resolves when the lease is lost or its deadline passes unrenewed.
    pub async fn lost(&self) -> LossReason {
        let mut lost = self.held.lost.subscribe();
        let mut deadline = self.held.deadline.subscribe();
        loop {
            if let Some(reason) = self.held.loss() {
                return reason;
            }
            let at = *deadline.borrow_and_update();
            tokio::select! {
                _ = lost.changed() => {}
                _ = deadline.changed() => {}
                () = sleep_until(at) => {}
            }
        }
    }

    /// Stops renewing and releases the lease. Fails with
    /// [`ClientError::Lost`] if it was already gone: then your lease ran out
    /// while you held it.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.done = true;
        self.shared.forget(&self.held);
        if let Some(reason) = *self.held.lost.borrow() {
            return Err(ClientError::Lost(reason));
        }
        release(&self.shared, &self.held.name, &self.held.token).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.shared.forget(&self.held);
        if self.held.lost.borrow().is_some() {
            return;
        }
        // Best effort: release in the background if a runtime is there; the
        // TTL frees the lock otherwise.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (shared, held) = (Arc::clone(&self.shared), Arc::clone(&self.held));
            runtime.spawn(async move {
                let _ = release(&shared, &held.name, &held.token).await;
            });
        }
    }
}

/// Whether a call failed because no connection to the broker could be made
/// (so the request was never sent).
fn not_connected(status: &tonic::Status) -> bool {
    if status.code() != Code::Unavailable {
        return false;
    }
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut
            ) {
                return true;
            }
        }
        if e.to_string().contains("connect error") {
            return true;
        }
        source = e.source();
    }
    false
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}

/// A token fit for logs and `Debug`: its first 4 characters only, enough to
/// correlate lines of one lease, useless for taking it over.
fn redacted(token: &str) -> String {
    format!("{}…", token.get(..4).unwrap_or(""))
}
