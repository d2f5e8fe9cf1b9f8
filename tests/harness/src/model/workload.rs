//! The random clients: each, from its own seeded generator, takes and
//! gives back leases on a few names (so that its calls collide with the
//! others'), over any of the brokers, and records every call and answer.
//!
//! Half of their Acquire, Renew and Release calls go as messages on a
//! Session stream (one per client and broker, opened again when it ends),
//! the other half as unary calls: the model judges both paths alike.
//!
//! What they do, by weight: acquire (try or wait, lock or semaphore permit,
//! sometimes a lock on the semaphore's name and the other way round, with
//! or without lock-delay, keeping their place and waiting again in it);
//! renew; heartbeat on a KeepAlive stream (which they also reset, half-close
//! and resume on another broker); release (also again, with a stale token
//! and with a stranger's); revoke; CheckFence; and idle, so that leases
//! expire. A call that gets no answer within its deadline is recorded as
//! [`Answer::Unknown`]; a status outside the contract (INTERNAL, a
//! malformed answer) is a finding of its own.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
    time::Instant,
};

use leasehold_server::proto::{
    lease_status::State, leasehold_service_client::LeaseholdServiceClient, session_request,
    session_response, AcquireRequest, CampaignRequest, CheckFenceRequest, KeepAliveRequest,
    KeepAliveResponse, LeaderRequest, Lease, LeaseRef, LossReason, ReleaseRequest, RenewRequest,
    ResignRequest, RevokeRequest, SessionCancel, SessionError, SessionRequest, SessionResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{transport::Channel, Code, Status, Streaming};

use super::{
    history::Recorder,
    rng::Rng,
    spec::{Answer, Call, Kind, Micros, Reason},
};

/// The names: two locks and a semaphore of [`SEMAPHORE_LIMIT`].
pub const LOCKS: [&str; 2] = ["l0", "l1"];
/// The semaphore's name (now and then acquired as a lock, and the locks'
/// names as semaphores: the broker must refuse the other kind while held).
pub const SEMAPHORE: &str = "s0";
/// How many permits the semaphore has.
pub const SEMAPHORE_LIMIT: u32 = 2;
/// An election (a lock under the election calls: Campaign, Leader,
/// Resign; its leadership lease renewed and heartbeated like any).
pub const ELECTION: &str = "e0";

/// A call's deadline beyond its wait: the store timeout (1 s) and slack.
const DEADLINE: Duration = Duration::from_millis(3_000);

/// What the clients saw that the model does not judge.
#[derive(Debug, Default)]
pub struct Tally {
    /// Calls made to the brokers (each lease of a heartbeat one), answered
    /// or not, refused ones included.
    pub calls: AtomicU64,
    /// Calls recorded without an answer ([`Answer::Unknown`]): they may or
    /// may not have taken effect.
    pub unknown: AtomicU64,
    /// Refused before they could take effect (RESOURCE_EXHAUSTED), or
    /// never sent (the broker was down); not recorded.
    pub refused: AtomicU64,
    /// KeepAlive streams the clients reset (RST_STREAM).
    pub streams_reset: AtomicU64,
    /// KeepAlive streams the clients half-closed, reading to the end.
    pub streams_half_closed: AtomicU64,
    /// KeepAlive streams opened (a client's first, or one resumed on any
    /// broker after the last ended).
    pub streams_opened: AtomicU64,
    /// Writes to the fenced resource.
    pub writes: AtomicU64,
    /// Those of them the resource refused (it had taken a higher fence).
    pub writes_refused: AtomicU64,
    /// Holders paused (a modelled GC pause) between their deadline check
    /// and their write.
    pub pauses: AtomicU64,
    /// Answers outside the contract: each a finding.
    pub surprises: Mutex<Vec<String>>,
}

/// A lease a client holds (it thinks).
#[derive(Clone)]
struct Held {
    name: &'static str,
    token: String,
    kind: Kind,
    fence: u64,
    /// Its own deadline: the send time of the last call that granted or
    /// renewed it, plus the TTL the store applied.
    deadline: Instant,
}

/// The fenced resource: the highest fence it accepted, per name; a lower
/// one is refused (the storage that Kleppmann's fencing asks for).
#[derive(Default)]
pub struct Resource {
    highest: Mutex<HashMap<&'static str, u64>>,
}

impl Resource {
    fn write(&self, name: &'static str, fence: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        let h = highest.entry(name).or_default();
        if fence >= *h {
            *h = fence;
            true
        } else {
            false
        }
    }
}

/// A KeepAlive stream of a client.
struct Beats {
    tx: mpsc::Sender<KeepAliveRequest>,
    rx: Streaming<KeepAliveResponse>,
    seq: u64,
}

/// What a Session stream's request waits on: its answer, or why none came.
type Waiter = oneshot::Sender<Result<session_response::Response, Status>>;

/// A Session stream of a client to one broker: Acquire, Renew and Release
/// as messages, answered by id (a reader task hands each to its waiter;
/// when the stream ends, every waiter hears UNAVAILABLE).
struct Link {
    tx: mpsc::Sender<SessionRequest>,
    waiting: Arc<Mutex<Option<HashMap<u64, Waiter>>>>,
    next_id: u64,
}

impl Link {
    async fn open(broker: &mut LeaseholdServiceClient<Channel>) -> Result<Link, Status> {
        let (tx, rx) = mpsc::channel(16);
        let mut responses = broker.session(ReceiverStream::new(rx)).await?.into_inner();
        let waiting: Arc<Mutex<Option<HashMap<u64, Waiter>>>> =
            Arc::new(Mutex::new(Some(HashMap::new())));
        let reader = waiting.clone();
        tokio::spawn(async move {
            let end = loop {
                match responses.message().await {
                    Ok(Some(SessionResponse {
                        id,
                        response: Some(response),
                    })) => {
                        let waiter = reader.lock().unwrap().as_mut().and_then(|w| w.remove(&id));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(Ok(response));
                        }
                    }
                    Ok(Some(empty)) => {
                        break Status::internal(format!("an empty answer: {empty:?}"))
                    }
                    Ok(None) => break Status::unavailable("the Session stream ended"),
                    Err(status) => break status,
                }
            };
            for (_, waiter) in reader.lock().unwrap().take().into_iter().flatten() {
                let _ = waiter.send(Err(Status::new(end.code(), end.message())));
            }
        });
        Ok(Link {
            tx,
            waiting,
            next_id: 0,
        })
    }

    fn alive(&self) -> bool {
        self.waiting.lock().unwrap().is_some() && !self.tx.is_closed()
    }

    /// Sends `request`; its answer comes on the receiver. A refusal is the
    /// status the unary call would have ended with (a kept place in its
    /// metadata, as the unary call carries it).
    async fn send(
        &mut self,
        request: session_request::Request,
    ) -> (
        u64,
        oneshot::Receiver<Result<session_response::Response, Status>>,
    ) {
        self.next_id += 1;
        let id = self.next_id;
        let (waiter, answer) = oneshot::channel();
        match self.waiting.lock().unwrap().as_mut() {
            Some(waiting) => {
                waiting.insert(id, waiter);
            }
            None => {
                let _ = waiter.send(Err(Status::unavailable("the Session stream ended")));
            }
        }
        let request = SessionRequest {
            id,
            timeout_ms: 0,
            request: Some(request),
        };
        if self.tx.send(request).await.is_err() {
            if let Some(waiting) = self.waiting.lock().unwrap().as_mut() {
                if let Some(waiter) = waiting.remove(&id) {
                    let _ = waiter.send(Err(Status::unavailable("the Session stream ended")));
                }
            }
        }
        (id, answer)
    }

    /// Ends the request `id` on the broker (its caller stopped waiting).
    fn cancel(&mut self, id: u64) {
        if let Some(waiting) = self.waiting.lock().unwrap().as_mut() {
            waiting.remove(&id);
        }
        self.next_id += 1;
        let _ = self.tx.try_send(SessionRequest {
            id: self.next_id,
            timeout_ms: 0,
            request: Some(session_request::Request::Cancel(SessionCancel { id })),
        });
    }
}

/// A Session refusal as the status the unary call would have ended with.
fn status_of(error: SessionError) -> Status {
    let code = Code::from_i32(error.code);
    if error.place.is_empty() {
        return Status::new(code, error.message);
    }
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(
        "leasehold-place",
        error.place.parse().expect("a place is ASCII"),
    );
    Status::with_metadata(code, error.message, metadata)
}

struct Client {
    id: usize,
    rng: Rng,
    brokers: Vec<LeaseholdServiceClient<Channel>>,
    /// A Session stream per broker, opened by the first call that goes
    /// over one (half of the Acquire, Renew and Release calls do).
    links: Vec<Option<Link>>,
    record: Arc<Recorder>,
    tally: Arc<Tally>,
    resource: Arc<Resource>,
    held: Vec<Held>,
    /// Tokens of leases that ended (for stale calls), newest last.
    ended: Vec<(&'static str, String)>,
    /// A place kept by an Acquire that ran out (name, place).
    place: Option<(&'static str, String)>,
    /// A lease just released, which the next heartbeat names once more (a
    /// heartbeat that crossed its own release: not a loss).
    crossed: Option<(&'static str, String)>,
    beats: Option<Beats>,
}

/// The brokers' clients (lazily connected: a broker that is down or
/// restarting fails the calls made to it, which is what the test wants).
pub fn connect(urls: &[String]) -> Vec<LeaseholdServiceClient<Channel>> {
    urls.iter()
        .map(|u| {
            let channel = Channel::from_shared(u.clone())
                .expect("a broker URL")
                .connect_timeout(Duration::from_millis(500))
                .connect_lazy();
            LeaseholdServiceClient::new(channel)
        })
        .collect()
}

/// Runs `clients` random clients on `brokers` until `stop`.
pub async fn run(
    seed: u64,
    clients: usize,
    brokers: Vec<String>,
    record: Arc<Recorder>,
    tally: Arc<Tally>,
    resource: Arc<Resource>,
    stop: Arc<AtomicBool>,
) {
    let mut tasks = Vec::new();
    for id in 0..clients {
        let mut client = Client {
            id,
            rng: Rng::fork(seed, id as u64 + 1),
            brokers: connect(&brokers),
            links: brokers.iter().map(|_| None).collect(),
            record: record.clone(),
            tally: tally.clone(),
            resource: resource.clone(),
            held: Vec::new(),
            ended: Vec::new(),
            place: None,
            crossed: None,
            beats: None,
        };
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                client.one_step().await;
            }
            // Give back what is held, so the run ends quietly.
            for held in std::mem::take(&mut client.held) {
                client.release(held.name, &held.token).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("a client does not panic");
    }
}

/// Whether a failed call never left the client: its connection to the
/// broker could not be made (the broker is down or restarting).
fn never_sent(status: &Status) -> bool {
    use std::error::Error as _;
    if status.code() != Code::Unavailable {
        return false;
    }
    let mut source = status.source();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = e.source();
    }
    false
}

/// The answer a failed call stands for: `None` when it is a surprise.
fn failed(status: &Status) -> Option<Answer> {
    match status.code() {
        Code::Aborted => Some(Answer::Aborted),
        Code::NotFound => Some(Answer::NotFound),
        Code::FailedPrecondition => Some(Answer::NotOwner),
        // The store did not answer, the broker went away or shuts down,
        // the connection broke: the call may or may not have happened.
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            Some(Answer::Unknown)
        }
        _ => None,
    }
}

impl Client {
    fn broker(&mut self) -> LeaseholdServiceClient<Channel> {
        let i = self.rng.index(self.brokers.len());
        self.brokers[i].clone()
    }

    /// `request` as a message on this client's Session stream to a random
    /// broker (opened if it has none, or its last one ended), answered
    /// within `limit`; past it, the request is cancelled on the broker and
    /// the call's outcome is unknown, as a unary call's past its deadline.
    /// `answer` takes the answer of the request's kind out of the response
    /// (or gives back a response of another kind; `what`: the one
    /// expected), so that the result reads as the unary call's.
    async fn over_session<T>(
        &mut self,
        request: session_request::Request,
        limit: Duration,
        answer: fn(session_response::Response) -> Result<T, session_response::Response>,
        what: &str,
    ) -> Result<Result<tonic::Response<T>, Status>, tokio::time::error::Elapsed> {
        let i = self.rng.index(self.brokers.len());
        if !self.links[i].as_ref().is_some_and(Link::alive) {
            self.links[i] = None;
            let mut broker = self.brokers[i].clone();
            match tokio::time::timeout(DEADLINE, Link::open(&mut broker)).await {
                Ok(Ok(link)) => self.links[i] = Some(link),
                Ok(Err(status)) => return Ok(Err(status)),
                Err(elapsed) => return Err(elapsed),
            }
        }
        let link = self.links[i].as_mut().expect("opened above");
        let (id, answered) = link.send(request).await;
        match tokio::time::timeout(limit, answered).await {
            Ok(answered) => Ok(answered
                .unwrap_or_else(|_| Err(Status::unavailable("the Session stream ended")))
                .and_then(|response| match response {
                    session_response::Response::Error(error) => Err(status_of(*error)),
                    other => answer(other)
                        .map(tonic::Response::new)
                        .map_err(|other| Status::internal(format!("not {what}: {other:?}"))),
                })),
            Err(elapsed) => {
                link.cancel(id);
                Err(elapsed)
            }
        }
    }

    fn surprise(&self, what: String) {
        self.tally.surprises.lock().unwrap().push(what);
    }

    /// Records `call` on `name`, answered by `result` (mapped by `ok`).
    fn note<T>(
        &mut self,
        name: &str,
        call: Call,
        invoked: Micros,
        result: Result<Result<T, Status>, tokio::time::error::Elapsed>,
        ok: impl FnOnce(T, &Recorder) -> Answer,
    ) -> Answer {
        let returned = self.record.now();
        self.tally.calls.fetch_add(1, Ordering::Relaxed);
        let answer = match result {
            Err(_) => Answer::Unknown,
            Ok(Ok(value)) => ok(value, &self.record),
            // Refused before it could take effect: a cap, or no connection
            // to the broker at all (it is down: the request was never sent).
            Ok(Err(status)) if status.code() == Code::ResourceExhausted || never_sent(&status) => {
                self.tally.refused.fetch_add(1, Ordering::Relaxed);
                return Answer::Unknown;
            }
            Ok(Err(status)) => match failed(&status) {
                Some(a) => a,
                None => {
                    self.surprise(format!("client {} {name} {call:?}: {status:?}", self.id));
                    return Answer::Unknown;
                }
            },
        };
        if answer == Answer::Unknown {
            self.tally.unknown.fetch_add(1, Ordering::Relaxed);
        }
        self.record
            .record(self.id, name, call, answer.clone(), invoked, returned);
        answer
    }

    async fn one_step(&mut self) {
        let refused = self.tally.refused.load(Ordering::Relaxed);
        self.step().await;
        if self.tally.refused.load(Ordering::Relaxed) != refused {
            // The broker is down: do not spin on it.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn step(&mut self) {
        let holding = !self.held.is_empty();
        let h = |w: u32| if holding { w } else { 0 };
        let locks = self.held.iter().any(|h| h.kind == Kind::Lock);
        let e = |w: u32| if self.ended.is_empty() { 0 } else { w };
        let choice = *self.rng.weighted(&[
            (30, 0),                          // acquire
            (h(12), 1),                       // renew
            (h(18), 2),                       // heartbeat
            (h(14), 3),                       // release
            (e(4), 4),                        // stale renew or release, or a repeated release
            (3, 5),                           // stranger's token
            (3, 6),                           // revoke
            (5, 7),                           // check fence
            (2, 8),                           // end the stream
            (10, 9),                          // idle
            (if locks { 25 } else { 0 }, 10), // write to the fenced resource
            (6, 11),                          // campaign
            (4, 12),                          // who leads
        ]);
        match choice {
            0 => self.acquire().await,
            1 => {
                let held = self.pick_held();
                self.renew(held.name, &held.token).await;
            }
            2 => {
                let crossed = self.crossed.take();
                self.beat(crossed).await;
            }
            3 => {
                let held = self.pick_held();
                self.release(held.name, &held.token).await;
            }
            4 => {
                let (name, token) = self.ended[self.rng.index(self.ended.len())].clone();
                if self.rng.chance(0.5) {
                    self.release(name, &token).await;
                } else {
                    self.renew(name, &token).await;
                }
            }
            5 => {
                let name = self.pick_name();
                let token = format!("{:016x}{:016x}", self.rng.next_u64(), self.rng.next_u64());
                match self.rng.below(3) {
                    0 => self.release(name, &token).await,
                    1 => self.renew(name, &token).await,
                    _ => self.beat(Some((name, token))).await,
                }
            }
            6 => self.revoke().await,
            7 => self.check_fence().await,
            8 => self.end_stream().await,
            11 => self.campaign().await,
            12 => self.leader().await,
            10 => self.write().await,
            _ => tokio::time::sleep(Duration::from_millis(self.rng.between(50, 600))).await,
        }
    }

    fn pick_held(&mut self) -> Held {
        self.held[self.rng.index(self.held.len())].clone()
    }

    fn pick_name(&mut self) -> &'static str {
        match self.rng.below(3) {
            0 => LOCKS[0],
            1 => LOCKS[1],
            _ => SEMAPHORE,
        }
    }

    /// A renewal sent at `sent` was applied with `ttl_ms`.
    fn renewed(&mut self, token: &str, sent: Instant, ttl_ms: u64) {
        if let Some(h) = self.held.iter_mut().find(|h| h.token == token) {
            h.deadline = sent + Duration::from_millis(ttl_ms);
        }
    }

    /// A renewal sent at `sent` with `ttl_ms` got no answer: it may have
    /// been applied, and if its TTL was shorter than what was left, the
    /// lease now ends sooner. A careful holder keeps the earlier of the two
    /// deadlines.
    fn maybe_renewed(&mut self, token: &str, sent: Instant, ttl_ms: u64) {
        if let Some(h) = self.held.iter_mut().find(|h| h.token == token) {
            h.deadline = h.deadline.min(sent + Duration::from_millis(ttl_ms));
        }
    }

    /// Writes to the fenced resource under a lock lease held, checking the
    /// deadline first as a careful holder does; now and then paused
    /// between the check and the write (a GC pause), possibly past the
    /// deadline: then only the fence keeps the late write out.
    async fn write(&mut self) {
        let locks: Vec<Held> = self
            .held
            .iter()
            .filter(|h| h.kind == Kind::Lock)
            .cloned()
            .collect();
        let held = locks[self.rng.index(locks.len())].clone();
        if Instant::now() >= held.deadline {
            return;
        }
        if self.rng.chance(0.1) {
            self.tally.pauses.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(self.rng.between(300, 2_000))).await;
        }
        let invoked = self.record.now();
        let accepted = self.resource.write(held.name, held.fence);
        let believed = Instant::now() < held.deadline;
        let returned = self.record.now();
        self.tally.writes.fetch_add(1, Ordering::Relaxed);
        if !accepted {
            self.tally.writes_refused.fetch_add(1, Ordering::Relaxed);
        }
        let call = Call::Write {
            token: self.record.token(&held.token),
            fence: held.fence,
            believed,
        };
        let answer = if accepted {
            Answer::Accepted
        } else {
            Answer::Refused
        };
        self.record
            .record(self.id, held.name, call, answer, invoked, returned);
    }

    fn forget(&mut self, token: &str) {
        if let Some(i) = self.held.iter().position(|h| h.token == token) {
            let h = self.held.remove(i);
            self.ended.push((h.name, h.token));
            if self.ended.len() > 16 {
                self.ended.remove(0);
            }
        }
    }

    async fn acquire(&mut self) {
        let name = self.pick_name();
        let mut kind = if name == SEMAPHORE {
            Kind::Permit {
                limit: SEMAPHORE_LIMIT,
            }
        } else {
            Kind::Lock
        };
        // Now and then the other kind on the same name: refused while the
        // name is held the other way, granted when it is free.
        if self.rng.chance(0.05) {
            kind = match kind {
                Kind::Lock => Kind::Permit {
                    limit: SEMAPHORE_LIMIT,
                },
                Kind::Permit { .. } => Kind::Lock,
            };
        }
        let ttl_ms = self.rng.between(600, 1_500);
        let wait_ms = if self.rng.chance(0.5) {
            0
        } else {
            self.rng.between(100, 1_500)
        };
        let lock_delay_ms = if kind == Kind::Lock && self.rng.chance(0.25) {
            self.rng.between(200, 800)
        } else {
            0
        };
        let keep_place = wait_ms > 0 && self.rng.chance(0.3);
        let place = match &self.place {
            Some((n, p)) if *n == name && wait_ms > 0 && self.rng.chance(0.7) => p.clone(),
            // Now and then a place that is not in line: a token of a lease
            // that ended (hostile or confused: no caller may choose its
            // token; the broker must give a fresh one).
            _ if wait_ms > 0 && !self.ended.is_empty() && self.rng.chance(0.05) => {
                self.ended[self.rng.index(self.ended.len())].1.clone()
            }
            _ => String::new(),
        };
        self.place = None;
        let request = AcquireRequest {
            name: name.into(),
            ttl_ms,
            holder: format!("c{}", self.id),
            wait_timeout_ms: wait_ms,
            lock_delay_ms,
            limit: match kind {
                Kind::Lock => 0,
                Kind::Permit { limit } => limit,
            },
            keep_place,
            place,
            ..Default::default()
        };
        let call = Call::Acquire {
            kind,
            ttl_ms,
            wait_ms,
            lock_delay_ms,
            keep_place,
        };
        let sent = Instant::now();
        let limit = Duration::from_millis(wait_ms) + DEADLINE;
        let result = if self.rng.chance(0.5) {
            self.over_session(
                session_request::Request::Acquire(request),
                limit,
                |r| match r {
                    session_response::Response::Acquire(a) => Ok(a),
                    other => Err(other),
                },
                "a grant",
            )
            .await
        } else {
            let mut broker = self.broker();
            tokio::time::timeout(limit, broker.acquire(request)).await
        };
        // A kept place comes back in the ABORTED status's metadata.
        if let Ok(Err(status)) = &result {
            if status.code() == Code::Aborted {
                if let Some(p) = status
                    .metadata()
                    .get("leasehold-place")
                    .and_then(|v| v.to_str().ok())
                {
                    self.place = Some((name, p.to_owned()));
                }
            }
        }
        let result = result.map(|r| {
            r.map(|r| {
                let r = r.into_inner();
                (r.lease.unwrap_or_default(), r.waited_ms)
            })
        });
        self.note_grant(name, kind, call, sent, result);
    }

    /// Records an Acquire or Campaign sent at `sent`, and keeps the lease
    /// it granted, with its deadline (the proto: send time + waited_ms +
    /// ttl_ms).
    fn note_grant(
        &mut self,
        name: &'static str,
        kind: Kind,
        call: Call,
        sent: Instant,
        result: Result<Result<(Lease, u64), Status>, tokio::time::error::Elapsed>,
    ) {
        let mut secret = None;
        let mut waited = 0;
        let invoked = self.record.micros(sent);
        let answer = self.note(name, call, invoked, result, |(lease, waited_ms), rec| {
            waited = waited_ms;
            secret = Some(lease.owner_token.clone());
            Answer::Granted {
                token: rec.token(&lease.owner_token),
                fence: lease.fence,
                ttl_ms: lease.ttl_ms,
            }
        });
        if let (Answer::Granted { fence, ttl_ms, .. }, Some(token)) = (answer, secret) {
            let deadline = sent + Duration::from_millis(waited + ttl_ms);
            self.held.push(Held {
                name,
                token,
                kind,
                fence,
                deadline,
            });
        }
    }

    async fn renew(&mut self, name: &'static str, token: &str) {
        let ttl_ms = self.rng.between(600, 1_500);
        let call = Call::Renew {
            token: self.record.token(token),
            ttl_ms,
        };
        let sent = Instant::now();
        let invoked = self.record.micros(sent);
        let request = RenewRequest {
            name: name.into(),
            owner_token: token.into(),
            ttl_ms,
            ..Default::default()
        };
        let result = if self.rng.chance(0.5) {
            self.over_session(
                session_request::Request::Renew(request),
                DEADLINE,
                |r| match r {
                    session_response::Response::Renew(r) => Ok(r),
                    other => Err(other),
                },
                "a renewal",
            )
            .await
        } else {
            let mut broker = self.broker();
            tokio::time::timeout(DEADLINE, broker.renew(request)).await
        };
        let answer = self.note(name, call, invoked, result, |r, _| {
            let r = r.into_inner();
            Answer::Alive {
                fence: r.fence,
                ttl_ms: r.ttl_ms,
            }
        });
        match answer {
            Answer::NotFound | Answer::NotOwner => self.forget(token),
            Answer::Alive { ttl_ms, .. } => self.renewed(token, sent, ttl_ms),
            Answer::Unknown => self.maybe_renewed(token, sent, ttl_ms),
            _ => {}
        }
    }

    async fn release(&mut self, name: &'static str, token: &str) {
        let call = Call::Release {
            token: self.record.token(token),
        };
        let mut broker = self.broker();
        let invoked = self.record.now();
        // An election's leadership is given up with Resign (a release of
        // the leadership lease, the proto says).
        let result = if name == ELECTION {
            let request = ResignRequest {
                election: name.into(),
                owner_token: token.into(),
            };
            tokio::time::timeout(DEADLINE, broker.resign(request))
                .await
                .map(|r| r.map(|_| ()))
        } else if self.rng.chance(0.5) {
            let request = ReleaseRequest {
                name: name.into(),
                owner_token: token.into(),
            };
            self.over_session(
                session_request::Request::Release(request),
                DEADLINE,
                |r| match r {
                    session_response::Response::Release(_) => Ok(()),
                    other => Err(other),
                },
                "a release",
            )
            .await
            .map(|r| r.map(|_| ()))
        } else {
            let request = ReleaseRequest {
                name: name.into(),
                owner_token: token.into(),
            };
            tokio::time::timeout(DEADLINE, broker.release(request))
                .await
                .map(|r| r.map(|_| ()))
        };
        let answer = self.note(name, call, invoked, result, |_, _| Answer::Released);
        if answer != Answer::Unknown || self.rng.chance(0.5) {
            self.forget(token);
        }
        if answer == Answer::Released && self.rng.chance(0.3) {
            self.crossed = Some((name, token.to_owned()));
        }
    }

    /// Campaign for the election: an Acquire of a lock whose holder label
    /// is the leader's value, and whose fence is its term.
    async fn campaign(&mut self) {
        let ttl_ms = self.rng.between(600, 1_500);
        let wait_ms = if self.rng.chance(0.5) {
            0
        } else {
            self.rng.between(100, 1_500)
        };
        let request = CampaignRequest {
            election: ELECTION.into(),
            value: format!("c{}", self.id),
            ttl_ms,
            wait_timeout_ms: wait_ms,
            keep_place: false,
            place: String::new(),
        };
        let call = Call::Acquire {
            kind: Kind::Lock,
            ttl_ms,
            wait_ms,
            lock_delay_ms: 0,
            keep_place: false,
        };
        let mut broker = self.broker();
        let sent = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_millis(wait_ms) + DEADLINE,
            broker.campaign(request),
        )
        .await;
        let result = result.map(|r| {
            r.map(|r| {
                let r = r.into_inner();
                (r.lease.unwrap_or_default(), r.waited_ms)
            })
        });
        self.note_grant(ELECTION, Kind::Lock, call, sent, result);
    }

    async fn leader(&mut self) {
        let mut broker = self.broker();
        let invoked = self.record.now();
        let request = LeaderRequest {
            election: ELECTION.into(),
        };
        let result = tokio::time::timeout(DEADLINE, broker.leader(request)).await;
        self.note(ELECTION, Call::Leader, invoked, result, |r, _| {
            let r = r.into_inner();
            Answer::Leader {
                present: r.present,
                term: r.term,
            }
        });
    }

    async fn revoke(&mut self) {
        let name = LOCKS[self.rng.index(LOCKS.len())];
        let mut broker = self.broker();
        let invoked = self.record.now();
        let request = RevokeRequest {
            name: name.into(),
            tenant: String::new(),
        };
        let result = tokio::time::timeout(DEADLINE, broker.revoke(request)).await;
        self.note(name, Call::Revoke, invoked, result, |r, _| {
            Answer::Revoked {
                fence: r.into_inner().fence,
            }
        });
    }

    async fn check_fence(&mut self) {
        let name = LOCKS[self.rng.index(LOCKS.len())];
        let fence = self.rng.below(3);
        let mut broker = self.broker();
        let invoked = self.record.now();
        let request = CheckFenceRequest {
            name: name.into(),
            fence,
        };
        let result = tokio::time::timeout(DEADLINE, broker.check_fence(request)).await;
        self.note(name, Call::CheckFence { fence }, invoked, result, |r, _| {
            let r = r.into_inner();
            Answer::Fence {
                current: r.current,
                current_fence: r.current_fence,
            }
        });
    }

    /// Ends the KeepAlive stream: reset (RST_STREAM) or half-close.
    async fn end_stream(&mut self) {
        let Some(beats) = self.beats.take() else {
            return;
        };
        if self.rng.chance(0.5) {
            self.tally.streams_reset.fetch_add(1, Ordering::Relaxed);
            drop(beats);
        } else {
            self.tally
                .streams_half_closed
                .fetch_add(1, Ordering::Relaxed);
            let Beats { tx, mut rx, .. } = beats;
            drop(tx);
            let _ = tokio::time::timeout(DEADLINE, async {
                while let Ok(Some(_)) = rx.message().await {}
            })
            .await;
        }
    }

    /// One heartbeat naming every lease held (and `stranger`'s token), on
    /// the stream (opened on any broker when there is none: a resumed
    /// session).
    async fn beat(&mut self, stranger: Option<(&'static str, String)>) {
        if self.beats.is_none() {
            let mut broker = self.broker();
            let (tx, rx) = mpsc::channel(4);
            match tokio::time::timeout(DEADLINE, broker.keep_alive(ReceiverStream::new(rx))).await {
                Ok(Ok(response)) => {
                    self.tally.streams_opened.fetch_add(1, Ordering::Relaxed);
                    self.beats = Some(Beats {
                        tx,
                        rx: response.into_inner(),
                        seq: 0,
                    });
                }
                _ => return,
            }
        }
        let ttl_ms = self.rng.between(600, 1_500);
        let mut leases: Vec<Held> = self.held.clone();
        if let Some((name, token)) = stranger {
            leases.push(Held {
                name,
                token,
                kind: Kind::Lock,
                fence: 0,
                deadline: Instant::now(),
            });
        }
        let beats = self.beats.as_mut().unwrap();
        beats.seq += 1;
        let seq = beats.seq;
        let request = KeepAliveRequest {
            seq,
            leases: leases
                .iter()
                .map(|h| LeaseRef {
                    name: h.name.into(),
                    owner_token: h.token.clone(),
                    ttl_ms,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let sent = Instant::now();
        let invoked = self.record.micros(sent);
        let answer = tokio::time::timeout(DEADLINE, async {
            beats
                .tx
                .send(request)
                .await
                .map_err(|_| Status::unavailable("stream closed"))?;
            loop {
                match beats.rx.message().await? {
                    Some(r) if r.seq == seq => return Ok(r),
                    Some(_) => continue,
                    None => return Err(Status::unavailable("stream ended")),
                }
            }
        })
        .await;
        let returned = self.record.now();
        let statuses = match answer {
            Ok(Ok(r)) => Some(r.leases),
            _ => {
                self.beats = None;
                None
            }
        };
        if statuses.as_ref().is_some_and(|s| s.len() != leases.len()) {
            self.surprise(format!(
                "heartbeat of {} leases answered {:?}",
                leases.len(),
                statuses
            ));
            return;
        }
        for (i, held) in leases.iter().enumerate() {
            let call = Call::Beat {
                token: self.record.token(&held.token),
                ttl_ms,
            };
            let answer = match statuses.as_ref().map(|s| &s[i]) {
                None => Answer::Unknown,
                Some(s) => match s.state() {
                    State::Alive => Answer::Alive {
                        fence: s.fence,
                        ttl_ms: s.ttl_ms,
                    },
                    State::Lost => Answer::Lost(match s.reason() {
                        LossReason::Expired => Reason::Expired,
                        LossReason::NotOwner => Reason::NotOwner,
                        LossReason::StoreLost => Reason::StoreLost,
                        LossReason::Revoked => Reason::Revoked,
                        LossReason::Unspecified => {
                            self.surprise(format!("heartbeat: STATE_LOST without a reason: {s:?}"));
                            continue;
                        }
                    }),
                    State::Unconfirmed | State::Unspecified => Answer::Unknown,
                    State::Rejected => {
                        self.surprise(format!("heartbeat rejected a lease: {}", s.message));
                        continue;
                    }
                },
            };
            self.tally.calls.fetch_add(1, Ordering::Relaxed);
            if answer == Answer::Unknown {
                self.tally.unknown.fetch_add(1, Ordering::Relaxed);
            }
            match answer {
                Answer::Lost(_) => self.forget(&held.token),
                Answer::Alive { ttl_ms, .. } => self.renewed(&held.token, sent, ttl_ms),
                Answer::Unknown => self.maybe_renewed(&held.token, sent, ttl_ms),
                _ => {}
            }
            self.record
                .record(self.id, held.name, call, answer, invoked, returned);
        }
    }
}
