//! The client: one connection set (failing over between brokers), one
//! Session stream for acquires, releases and heartbeats (`session.rs`), the
//! unary calls for the rest (and for everything, against a broker without
//! the Session call).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use leasehold_proto::{
    leasehold_service_client::LeaseholdServiceClient, AcquireRequest, AcquireResponse,
    CheckFenceRequest, DescribeRequest, LeaderRequest, ListRequest, ObserveRequest, ReleaseRequest,
    RevokeRequest,
};
use leasehold_proto::{session_request::Request, session_response::Response};
use tokio::{
    sync::{watch, Notify},
    time::Instant,
};
use tonic::{service::interceptor::InterceptedService, transport::Channel, Code, Status};

use crate::{
    error::{source_chain, Refusal},
    keeper,
    session::{self, Link},
    AcquireOptions, ClientError, ClientOptions, ClientTls, Credentials, Description, Grant, Held,
    LeaderInfo, Lease, ListPage, Listed, LossReason, Observation, TtlAdvice,
};

/// The log target of the client's TTL advice warning, for a program that
/// shows the advice its own way (as the `leasehold` commands do) to turn
/// the log line off.
pub const TTL_ADVICE_TARGET: &str = "leasehold_client::ttl_advice";

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
    /// The Session stream that carries acquires, releases and heartbeats.
    pub(crate) link: Link,
    /// The brokers' --max-wait as last learnt, in milliseconds: the longest
    /// wait one Acquire call of a chain asks for.
    max_wait_ms: AtomicU64,
    /// The broker's TTL advice on the last heartbeat answered.
    advice: watch::Sender<Option<TtlAdvice>>,
}

/// The broker's default --max-wait, assumed until a refusal says otherwise.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(300);

impl Shared {
    /// Takes in the TTL advice of a heartbeat's answer (none: the TTLs are
    /// fit): kept for [`Client::ttl_advice`], and logged at WARN the first
    /// time on a stream (`advised`: whether it was).
    pub(crate) fn advised(&self, advice: Option<leasehold_proto::TtlAdvice>, advised: &mut bool) {
        let advice = advice.map(TtlAdvice::from);
        if let Some(advice) = &advice {
            if !std::mem::replace(advised, true) {
                tracing::warn!(
                    target: TTL_ADVICE_TARGET,
                    round_trip_p99_ms = advice.round_trip_p99.as_secs_f64() * 1e3,
                    suggested_ttl_ms = millis(advice.suggested_ttl),
                    "the broker says a lease's TTL is short for this connection's latency: {}",
                    advice.message
                );
            }
        }
        self.advice.send_if_modified(|current| {
            let changed = *current != advice;
            if changed {
                *current = advice;
            }
            changed
        });
    }

    /// The current replica: its index (for [`Shared::unreachable`]) and a
    /// client for it.
    pub(crate) fn broker(&self) -> (usize, Broker) {
        let index = self.current.load(Ordering::Relaxed);
        (index, self.brokers[index % self.brokers.len()].clone())
    }

    /// How many broker replicas the client knows.
    pub(crate) fn replicas(&self) -> usize {
        self.brokers.len()
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
    pub(crate) async fn call<T, F, Fut>(&self, mut call: F) -> Result<T, Status>
    where
        F: FnMut(Broker) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
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

    /// Runs `request` on the Session stream: `None` when the unary call is
    /// to be used instead (the client was built for unary calls, or the
    /// broker has none). A refusal comes back as the status the unary call
    /// would have failed with.
    pub(crate) async fn on_session(&self, request: Request) -> Option<Result<Response, Status>> {
        let stream = match self.link.stream(self).await {
            Ok(Some(stream)) => stream,
            Ok(None) => return None,
            // A cap on the caller's streams refused it: the call does
            // without (a unary call is no stream).
            Err(status) if status.code() == Code::ResourceExhausted => return None,
            Err(status) => return Some(Err(status)),
        };
        Some(match stream.call(0, request).await {
            Ok(Response::Error(error)) => Err(session::status(*error)),
            other => other,
        })
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
pub type Broker = LeaseholdServiceClient<InterceptedService<Channel, Credentials>>;

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
            // Without a scheme tonic would fail at connect time, as if the
            // broker were down: a typo must not look like an outage.
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ClientError::Config(format!(
                    "bad broker URL '{url}': it must start with http:// or https://"
                )));
            }
            let endpoint = Channel::from_shared(url.clone())
                .map_err(|e| ClientError::Config(format!("bad broker URL '{url}': {e}")))?;
            let endpoint = match url.starts_with("https://") {
                true => endpoint
                    .tls_config(ClientTls::config(tls))
                    .map_err(|e| ClientError::Config(format!("TLS settings for '{url}': {e}")))?,
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
            return Err(ClientError::Config("no broker URL given".into()));
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
            link: Link::default(),
            max_wait_ms: AtomicU64::new(millis(DEFAULT_MAX_WAIT)),
            advice: watch::Sender::new(None),
        });
        shared.link.disabled.store(options.unary, Ordering::Relaxed);
        tokio::spawn(keeper::run(Arc::downgrade(&shared)));
        Ok(Client { shared })
    }

    /// Takes the lease on `name`; it keeps itself alive until released,
    /// dropped or lost.
    pub async fn acquire(&self, name: &str, opts: AcquireOptions) -> Result<Lease, ClientError> {
        let (margin, ttl_auto) = (opts.margin, opts.ttl_auto);
        let (lease, sent, waited_ms) = self.grant_waited(name, opts).await?;
        Ok(self.keep(lease, sent, waited_ms, margin, ttl_auto))
    }

    /// Takes the lease on `name` *without* keeping it alive: it expires at
    /// its TTL unless the caller renews or releases it by its owner token
    /// (what a shell script does with `leasehold acquire` and `leasehold
    /// release`). Prefer [`Client::acquire`] in a program.
    pub async fn grant(&self, name: &str, opts: AcquireOptions) -> Result<Grant, ClientError> {
        Ok(self.grant_waited(name, opts).await?.0.into())
    }

    /// The Acquire calls of one acquire: the lease, when the call that got
    /// it was sent, and how long the broker made that call wait.
    ///
    /// A wait longer than the broker's --max-wait (or without end:
    /// [`AcquireOptions::wait_forever`]) is a chain of calls, each within
    /// it. Each but the last asks the broker to keep its place in line
    /// when its wait runs out (keep_place), and the next, sent at once,
    /// waits in it: callers who arrived later stay behind. The broker's
    /// --max-wait is read from its refusal of a longer wait (`max_wait_ms`).
    async fn grant_waited(
        &self,
        name: &str,
        opts: AcquireOptions,
    ) -> Result<(leasehold_proto::Lease, Instant, u64), ClientError> {
        let start = Instant::now();
        let end = if opts.wait == Duration::MAX {
            None
        } else {
            Some(start.checked_add(opts.wait).unwrap_or(start))
        };
        let mut request = AcquireRequest {
            name: name.to_owned(),
            ttl_ms: if opts.ttl_auto { 0 } else { millis(opts.ttl) },
            ttl_auto: opts.ttl_auto,
            holder: opts.holder,
            lock_delay_ms: millis(opts.lock_delay),
            limit: opts.limit,
            ..Default::default()
        };
        loop {
            let max_wait = Duration::from_millis(self.shared.max_wait_ms.load(Ordering::Relaxed));
            let now = Instant::now();
            let left = end.map_or(Duration::MAX, |end| end.saturating_duration_since(now));
            let segment = left.min(max_wait);
            let last = end.is_some_and(|end| now + segment >= end);
            request.wait_timeout_ms = millis(segment);
            request.keep_place = !last;
            let sent = Instant::now();
            let refusal = match self.acquire_call(&request).await {
                Ok(response) => {
                    let lease = response.lease.ok_or_else(|| {
                        ClientError::Refused(Box::new(Refusal::local(
                            Code::Internal,
                            "the broker granted no lease",
                        )))
                    })?;
                    return Ok((lease, sent, response.waited_ms));
                }
                Err(status) => Refusal::from_status(&status),
            };
            if refusal.reason() == "BAD_ARGUMENT" && refusal.get("argument") == Some("wait") {
                // A broker with a shorter --max-wait: chain shorter calls.
                if let Some(max) = refusal.duration("max_wait_ms") {
                    if !max.is_zero() && max < segment {
                        self.shared
                            .max_wait_ms
                            .store(millis(max), Ordering::Relaxed);
                        continue;
                    }
                }
            }
            if refusal.code() == Code::Aborted && !last {
                if let Some(place) = refusal.place() {
                    request.place = place.to_owned();
                    continue;
                }
            }
            return Err(refusal.into());
        }
    }

    /// One Acquire call, on the Session stream or unary.
    async fn acquire_call(&self, request: &AcquireRequest) -> Result<AcquireResponse, Status> {
        match self
            .shared
            .on_session(Request::Acquire(request.clone()))
            .await
        {
            Some(Ok(Response::Acquire(response))) => Ok(response),
            Some(Ok(other)) => Err(Status::internal(unexpected_text(&other))),
            Some(Err(status)) => Err(status),
            None => Ok(self
                .shared
                .call(|mut broker| {
                    let request = request.clone();
                    async move { broker.acquire(request).await }
                })
                .await?
                .into_inner()),
        }
    }

    /// Keeps `lease`, granted to a request sent at `sent` after
    /// `waited_ms` of waiting, alive from now on.
    fn keep(
        &self,
        lease: leasehold_proto::Lease,
        sent: Instant,
        waited_ms: u64,
        margin: Option<Duration>,
        ttl_auto: bool,
    ) -> Lease {
        // The grant happened no sooner than `waited_ms` after we sent.
        let granted_no_sooner_than = sent + Duration::from_millis(waited_ms);
        let ttl = Duration::from_millis(lease.ttl_ms);
        let deadline = (granted_no_sooner_than + ttl)
            .checked_sub(Held::margin_for(margin, ttl))
            .unwrap_or(granted_no_sooner_than);
        let held = Arc::new(Held {
            name: lease.name,
            token: lease.owner_token,
            fence: lease.fence,
            ttl_ms: AtomicU64::new(lease.ttl_ms),
            ttl_auto,
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

    /// The broker's advice on the TTLs of this client's leases, from the
    /// last heartbeat answered: `Some` while a lease has a TTL under 10
    /// times the p99 of the heartbeats' round trips (a slow heartbeat more
    /// and it is lost). Logged once per stream at WARN as well.
    pub fn ttl_advice(&self) -> Option<TtlAdvice> {
        self.shared.advice.borrow().clone()
    }

    /// The TTL advice as it changes: `changed().await` wakes when advice
    /// appears, changes or clears (a callback's trigger).
    pub fn ttl_advice_changes(&self) -> watch::Receiver<Option<TtlAdvice>> {
        self.shared.advice.subscribe()
    }

    /// Who holds `name` (no owner token).
    pub async fn describe(&self, name: &str) -> Result<Description, ClientError> {
        self.describe_in("", name).await
    }

    /// Who holds `name` in `tenant`'s namespace (empty: the caller's own;
    /// another's needs the `admin` permission).
    pub async fn describe_in(&self, tenant: &str, name: &str) -> Result<Description, ClientError> {
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
            .into_inner()
            .into())
    }

    /// One page of the names that start with `prefix` and have something
    /// on them (a lease, permits, waiters, a lock-delay), in `tenant`'s
    /// namespace (empty: the caller's own; another's, or `*` for every
    /// tenant's, needs the `admin` permission). `page_size` bounds the
    /// names the broker looks at (0: its default, 100; at most 1000), so a
    /// page may hold fewer entries, even none, while
    /// [`ListPage::next_page_token`] is not empty: pass it back as
    /// `page_token` (empty to start) until it is.
    pub async fn list_page(
        &self,
        tenant: &str,
        prefix: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<ListPage, ClientError> {
        let request = ListRequest {
            prefix: prefix.to_owned(),
            tenant: tenant.to_owned(),
            page_size,
            page_token: page_token.to_owned(),
        };
        let page = self
            .shared
            .call(|mut broker| {
                let request = request.clone();
                async move { broker.list(request).await }
            })
            .await?
            .into_inner();
        Ok(ListPage {
            locks: page.locks.into_iter().map(Listed::from).collect(),
            next_page_token: page.next_page_token,
        })
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
        let request = ObserveRequest {
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
pub(crate) async fn release(
    shared: &Shared,
    name: &str,
    owner_token: &str,
) -> Result<(), ClientError> {
    let request = ReleaseRequest {
        name: name.to_owned(),
        owner_token: owner_token.to_owned(),
    };
    let mut pause = RELEASE_RETRY;
    for tries_left in (0..RELEASE_TRIES).rev() {
        let answer = match shared.on_session(Request::Release(request.clone())).await {
            Some(Ok(Response::Release(_))) => Ok(()),
            Some(Ok(other)) => return Err(unexpected(&other)),
            Some(Err(status)) => Err(status),
            None => shared
                .call(|mut broker| {
                    let request = request.clone();
                    async move { broker.release(request).await }
                })
                .await
                .map(|_| ()),
        };
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
fn broken(status: &Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::Unknown)
}

fn release_outcome(answer: Result<(), Status>) -> Result<(), ClientError> {
    match answer {
        Ok(()) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Err(ClientError::Lost(
            if Refusal::from_status(&s).reason() == "LEASE_REVOKED" {
                LossReason::Revoked
            } else {
                LossReason::Expired
            },
        )),
        Err(s) if s.code() == Code::FailedPrecondition => {
            Err(ClientError::Lost(LossReason::NotOwner))
        }
        Err(s) => Err(s.into()),
    }
}

/// A Session answer of the wrong kind for its request: a broker defect.
fn unexpected(response: &Response) -> ClientError {
    ClientError::Refused(Box::new(Refusal::local(
        Code::Internal,
        unexpected_text(response),
    )))
}

fn unexpected_text(response: &Response) -> String {
    format!("the broker answered with {response:?} where another answer was due")
}

/// Whether a call failed because no connection to the broker could be made
/// (so the request was never sent).
pub(crate) fn not_connected(status: &Status) -> bool {
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

/// `duration` in whole milliseconds, saturating at `u64::MAX` rather than
/// wrapping as `as u64` would (`Duration::as_millis` is a `u128`).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
