//! The Redis store: each operation is one Lua script (atomic in Redis), run
//! by `EVALSHA` over one multiplexed connection shared by every request.
//!
//! Keys: the lease of `name` is the hash `{prefix}{name}` (the braces are a
//! Redis Cluster hash tag, so everything about one name lives in one slot) and
//! its releases are published on `{prefix}{name}:released`. Waiters subscribe
//! to that channel on a second connection, in RESP3 so that subscriptions and
//! PINGs share it; the connection manager reconnects and resubscribes by itself.
//!
//! Every call is bounded by the store timeout and fails with UNAVAILABLE past
//! it, so a dead Redis never hangs a request.
//!
//! Topologies: one server (`redis://`); the primary the sentinels name
//! (`redis+sentinel://`, followed across failovers: see `sentinel`); or a
//! Redis Cluster (`redis+cluster://`: scripts through redis-rs' cluster
//! connection, the subscription on one live node: see `cluster`). Every
//! script touches the keys of one name only, all in its hash tag's slot.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client, ErrorKind, FromRedisValue, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind,
    RedisError, Script, ServerErrorKind, Value,
};
use std::sync::{RwLock, Weak};
use tokio::sync::{mpsc, Notify};

use super::{
    cluster::ClusterTarget,
    sentinel::SentinelTarget,
    watch::{SubscriptionRequest, Watchers},
    Acquired, Blocked, BlockedBy, Checked, Described, Event, GrantSpec, LeaseInfo, RenewItem,
    Renewed, Revocation, StoreOptions, QUEUE_LIFETIME,
};
use crate::error::{Error, Result};

/// The scripts, hashed once at start-up; `EVALSHA` falls back to loading the
/// script when Redis does not know it (after a restart).
struct Scripts {
    acquire: Script,
    renew: Script,
    renew_many: Script,
    renew_lock: Script,
    renew_permit: Script,
    release: Script,
    revoke: Script,
    dequeue: Script,
    refresh: Script,
    semaphore_acquire: Script,
    describe: Script,
}

/// Scripts cannot call one another: the ones that write a lease start with
/// the shared constants, those that read or change the wait line with its
/// code (line.lua; queue.lua for a waiter's own place), those that renew
/// with the renewal function.
const ACQUIRE: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/line.lua"),
    include_str!("lua/queue.lua"),
    include_str!("lua/acquire.lua")
);
const SEMAPHORE_ACQUIRE: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/line.lua"),
    include_str!("lua/queue.lua"),
    include_str!("lua/semaphore_acquire.lua")
);
const RENEW: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/renew_lease.lua"),
    include_str!("lua/renew.lua")
);
const RENEW_MANY: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/renew_lease.lua"),
    include_str!("lua/renew_many.lua")
);
const RENEW_LOCK: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/renew_lease.lua"),
    include_str!("lua/renew_lock.lua")
);
const RENEW_PERMIT: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/renew_lease.lua"),
    include_str!("lua/renew_permit.lua")
);

/// Most leases renewed by one run of `renew_many.lua`. Redis runs nothing
/// else while a script runs: a bound keeps each run well under a millisecond
/// (a heartbeat naming more leases becomes several runs, still in one round
/// trip).
const RENEW_BATCH: usize = 250;
const RELEASE: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/line.lua"),
    include_str!("lua/release.lua")
);
const REVOKE: &str = concat!(
    include_str!("lua/constants.lua"),
    include_str!("lua/revoke.lua")
);
const DEQUEUE: &str = concat!(
    include_str!("lua/line.lua"),
    include_str!("lua/dequeue.lua")
);
const REFRESH: &str = concat!(
    include_str!("lua/line.lua"),
    include_str!("lua/refresh.lua")
);

/// Most places renewed by one run of `refresh.lua`: a bound on how long
/// Redis runs nothing else (about a millisecond). More waiters of one name
/// on one broker become several runs, one after the other and not in one
/// pipeline: Redis serves a client's whole pipeline before anyone else's,
/// and 10,000 places in one would hold up every other call (a handoff
/// among them) for tens of milliseconds once a second.
const REFRESH_BATCH: usize = 250;
const DESCRIBE: &str = include_str!("lua/describe.lua");

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            renew_many: Script::new(RENEW_MANY),
            renew_lock: Script::new(RENEW_LOCK),
            renew_permit: Script::new(RENEW_PERMIT),
            release: Script::new(RELEASE),
            revoke: Script::new(REVOKE),
            dequeue: Script::new(DEQUEUE),
            refresh: Script::new(REFRESH),
            semaphore_acquire: Script::new(SEMAPHORE_ACQUIRE),
            describe: Script::new(DESCRIBE),
        }
    }
}

/// Every script as Redis runs it, with its file name, for tests that load
/// each one into a real Redis.
pub const SCRIPTS: [(&str, &str); 11] = [
    ("acquire.lua", ACQUIRE),
    ("renew.lua", RENEW),
    ("renew_many.lua", RENEW_MANY),
    ("renew_lock.lua", RENEW_LOCK),
    ("renew_permit.lua", RENEW_PERMIT),
    ("release.lua", RELEASE),
    ("revoke.lua", REVOKE),
    ("dequeue.lua", DEQUEUE),
    ("refresh.lua", REFRESH),
    ("semaphore_acquire.lua", SEMAPHORE_ACQUIRE),
    ("describe.lua", DESCRIBE),
];

/// The connection scripts run on.
#[derive(Clone)]
enum Conn {
    /// One server (`redis://`, or the primary Sentinel named).
    Single(ConnectionManager),
    /// A cluster: routes each command by its keys' slot, follows MOVED and
    /// ASK, and learns the new owner of a slot after a failover.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the store finds its servers, beyond the first connection.
enum Topology {
    /// A fixed address.
    Single,
    /// The primary is whatever the sentinels name.
    Sentinel(Arc<SentinelTarget>),
    /// Cluster nodes: the subscription moves between them.
    Cluster(Arc<ClusterTarget>),
}

struct Inner {
    /// The connection for scripts: `None` until the primary is known (a
    /// Sentinel store asks the sentinels first). A std lock: read to clone
    /// the connection (an `Arc` inside), written only when the primary
    /// moves.
    conn: RwLock<Option<Conn>>,
    /// The subscription connection, as the subscription task has it (for
    /// health pings).
    subscriber: RwLock<Option<ConnectionManager>>,
    topology: Topology,
    /// Wakes the task that follows the topology (Sentinel, Cluster): a
    /// failed call may mean a failover.
    follow: Notify,
    scripts: Scripts,
    prefix: String,
    timeout: Duration,
    /// Replicas that must acknowledge each grant and renewal (WAIT), and how
    /// long to wait for them; 0: no WAIT.
    replica_acks: u32,
    replica_ack_timeout: Duration,
    /// Highest fence this replica has seen, passed to every grant as a floor:
    /// if Redis lost its data *and* its clock stepped back, fences issued from
    /// here still do not go backwards.
    high_water: AtomicU64,
    watchers: Watchers,
}

/// Makes the store's connections, with its TLS settings and timeouts.
struct Connector {
    tls_ca: Option<Vec<u8>>,
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
    watchers: Watchers,
}

impl Connector {
    /// A client for `info`: with a private CA or a client certificate for
    /// rediss://, otherwise the URL alone (rediss:// then verifies against
    /// the system's roots).
    fn client(&self, info: redis::ConnectionInfo) -> redis::RedisResult<Client> {
        match (&self.tls_ca, &self.tls_client) {
            (None, None) => Client::open(info),
            (ca, cert) => Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: cert.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                    root_cert: ca.clone(),
                },
            ),
        }
    }

    fn config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
    }

    /// The connection for a cluster's scripts, connecting lazily. Retries
    /// are few and short: the store timeout bounds every call, and redis-rs'
    /// defaults (16 retries, waits from 1.28 s) would outlast it.
    fn cluster(
        &self,
        cluster: &ClusterTarget,
    ) -> redis::RedisResult<redis::cluster_async::ClusterConnection> {
        let first = cluster.seeds[0].redis_settings();
        let mut builder =
            redis::cluster::ClusterClient::builder(cluster.seeds.iter().cloned().map(nodelay))
                .retries(3)
                .min_retry_wait(20)
                .max_retry_wait(200)
                .connection_timeout(self.timeout)
                .response_timeout(self.timeout);
        if let Some(user) = first.username() {
            builder = builder.username(user);
        }
        if let Some(password) = first.password() {
            builder = builder.password(password);
        }
        if self.tls_ca.is_some() || self.tls_client.is_some() {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: self
                    .tls_client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: self.tls_ca.clone(),
            });
        }
        let config = redis::cluster::ClusterConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout);
        Ok(builder
            .build()?
            .get_pending_async_connection_with_config(config))
    }

    /// The connection for scripts, connecting lazily (the broker starts,
    /// and reports NOT_SERVING, while Redis is down).
    fn commands(&self, info: redis::ConnectionInfo) -> redis::RedisResult<ConnectionManager> {
        ConnectionManager::new_lazy_with_config(self.client(nodelay(info))?, self.config())
    }

    /// The subscription connection: RESP3, so that subscriptions and PINGs
    /// share it; pushed messages wake the watches of their channel, and the
    /// manager resubscribes by itself after a reconnection.
    fn subscriber(&self, info: redis::ConnectionInfo) -> redis::RedisResult<ConnectionManager> {
        let info = nodelay(info);
        let resp3 = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3),
        );
        let pushed = self.watchers.clone();
        let on_push = move |push: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
            match push.kind {
                PushKind::Message => {
                    // data = [channel, message]; watches are keyed by channel,
                    // and the message names the waiter to wake (release.lua).
                    if let [Value::BulkString(channel), Value::BulkString(next), ..] =
                        push.data.as_slice()
                    {
                        if let (Ok(channel), Ok(next)) =
                            (std::str::from_utf8(channel), std::str::from_utf8(next))
                        {
                            pushed.wake(channel, next);
                        }
                    }
                }
                // Releases may have gone unseen while disconnected: every
                // waiter looks again (and fails fast if Redis is still down).
                PushKind::Disconnection => pushed.wake_all(),
                _ => {}
            }
            Ok(())
        };
        ConnectionManager::new_lazy_with_config(
            self.client(resp3)?,
            self.config()
                .set_push_sender(on_push)
                .set_automatic_resubscription(),
        )
    }
}

/// Nagle off (redis-rs leaves it on; Jedis and Lettuce turn it off): with
/// it, the last partial segment of a large pipeline (a heartbeat of 1,000
/// leases is about 100 kB) waits until the segments before it are
/// acknowledged, and the receiver may delay that ACK 40 ms.
fn nodelay(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true))
}

/// First and longest pause before an attempt refused with TRYAGAIN is made
/// again (see [`RedisStore::retrying`]).
const TRYAGAIN_PAUSE_MIN: Duration = Duration::from_millis(10);
const TRYAGAIN_PAUSE_MAX: Duration = Duration::from_millis(100);

/// How often a Sentinel store asks the sentinels which server is primary
/// (besides right after a failed call).
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest time between two such looks.
const FOLLOW_GAP: Duration = Duration::from_millis(50);

/// The Redis store; cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl RedisStore {
    /// Connects lazily to the Redis at `url` (`redis://`, `rediss://`), or
    /// to the primary the sentinels of a `redis+sentinel://` URL name: the
    /// broker starts (and reports NOT_SERVING) even while Redis is down, and
    /// connects when it is up.
    pub fn open(url: &str, options: &StoreOptions) -> Result<Self> {
        let bad_url = |e: RedisError| Error::InvalidArgument(format!("bad Redis URL: {e}"));
        let topology = match (SentinelTarget::parse(url)?, ClusterTarget::parse(url)?) {
            (Some(sentinel), _) => Topology::Sentinel(Arc::new(sentinel)),
            (_, Some(cluster)) => Topology::Cluster(Arc::new(cluster)),
            _ => Topology::Single,
        };
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (switches, switches_rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(requests));
        let connector = Arc::new(Connector {
            tls_ca: options.tls_ca.clone(),
            tls_client: options.tls_client.clone(),
            timeout: options.timeout,
            watchers: watchers.clone(),
        });
        let (conn, subscriber) = match &topology {
            Topology::Sentinel(_) => (None, None),
            // Subscribed on the first seed to begin with; `follow_nodes`
            // moves the subscription when that node stops answering.
            Topology::Cluster(cluster) => (
                Some(Conn::Cluster(connector.cluster(cluster).map_err(bad_url)?)),
                Some(
                    connector
                        .subscriber(cluster.seeds[0].clone())
                        .map_err(bad_url)?,
                ),
            ),
            Topology::Single => {
                let info = url.into_connection_info().map_err(bad_url)?;
                (
                    Some(Conn::Single(
                        connector.commands(info.clone()).map_err(bad_url)?,
                    )),
                    Some(connector.subscriber(info).map_err(bad_url)?),
                )
            }
        };
        let store = RedisStore {
            inner: Arc::new(Inner {
                conn: RwLock::new(conn),
                subscriber: RwLock::new(subscriber.clone()),
                topology,
                follow: Notify::new(),
                scripts: Scripts::new(),
                prefix: options.key_prefix.clone(),
                timeout: options.timeout,
                replica_acks: options.replica_acks,
                replica_ack_timeout: options.replica_ack_timeout,
                high_water: AtomicU64::new(0),
                watchers: watchers.clone(),
            }),
        };
        if let Some(subscriber) = subscriber {
            let _ = switches.send(subscriber);
        }
        tokio::spawn(run_subscriptions(
            requests_rx,
            switches_rx,
            options.timeout,
            watchers,
        ));
        match &store.inner.topology {
            Topology::Single => {}
            Topology::Sentinel(_) => {
                tokio::spawn(follow_primary(
                    Arc::downgrade(&store.inner),
                    connector,
                    switches,
                ));
            }
            Topology::Cluster(_) => {
                tokio::spawn(follow_nodes(
                    Arc::downgrade(&store.inner),
                    connector,
                    switches,
                ));
            }
        }
        Ok(store)
    }

    /// The connection for scripts, or UNAVAILABLE while no primary is known.
    fn conn(&self) -> Result<Conn> {
        self.inner
            .conn
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                Error::Unavailable(
                    "no Redis primary known yet: the sentinels have not named one".into(),
                )
            })
    }

    /// A call failed in a way a failover would explain: have the primary
    /// looked up again now rather than at the next tick.
    fn suspect(&self, e: &RedisError) {
        if e.is_connection_dropped()
            || e.is_io_error()
            || e.is_timeout()
            || e.is_connection_refusal()
            || matches!(e.kind(), ErrorKind::Server(ServerErrorKind::ReadOnly))
        {
            self.inner.follow.notify_one();
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self.inner.topology, Topology::Cluster(_))
    }

    pub(crate) fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    fn key(&self, name: &str) -> String {
        lease_key(&self.inner.prefix, name)
    }

    fn keys(&self, name: &str) -> NameKeys {
        let lease = self.key(name);
        NameKeys {
            queue: format!("{lease}:line"),
            alive: format!("{lease}:until"),
            permits: format!("{lease}:permits"),
            fences: self.fence_counter(&lease),
            lease,
        }
    }

    /// The fence counter for the name whose lease key is `lease`: one key on
    /// a Redis server; on a Cluster one per hash slot, in the name's slot
    /// (so that the grant scripts stay single-slot), never one per name.
    fn fence_counter(&self, lease: &str) -> String {
        fence_counter_key(&self.inner.prefix, lease, self.is_cluster())
    }

    /// Records a fence seen in a reply, raising the floor for later grants.
    fn saw_fence(&self, fence: u64) {
        self.inner.high_water.fetch_max(fence, Ordering::Relaxed);
    }

    /// Runs one Redis call under the store timeout.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        bounded(op, self.inner.timeout, fut).await
    }

    /// Runs `script` on `key` with `args` (by EVALSHA), within the store
    /// timeout.
    async fn eval<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        self.retrying(op, |mut conn| async move {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(arg);
            }
            invocation.invoke_async::<T>(&mut conn).await
        })
        .await
    }

    /// Runs `attempt` within the store timeout. An attempt whose connection
    /// turns out to be broken (Redis restarted, a proxy dropped it) is made
    /// once more on the new connection: every script is safe to repeat with
    /// the same arguments. An attempt refused with TRYAGAIN (a Redis
    /// Cluster slot migrating: a script whose keys are partly on either
    /// node; nothing ran) is made again after a short pause until the store
    /// timeout, since migrating a slot's keys takes longer than redis-rs'
    /// own few retries.
    async fn retrying<T, F, Fut>(&self, op: &'static str, mut attempt: F) -> Result<T>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.timeout;
        let mut broken = false;
        let mut pause = TRYAGAIN_PAUSE_MIN;
        loop {
            match tokio::time::timeout_at(deadline, attempt(self.conn()?)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if !broken && (e.is_connection_dropped() || e.is_io_error()) => {
                    self.suspect(&e);
                    tracing::debug!(op, error = %e, "Redis connection broken; retrying once");
                    broken = true;
                }
                Ok(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::TryAgain) => {
                    if tokio::time::Instant::now() + pause >= deadline {
                        return Err(Error::Unavailable(format!(
                            "Redis Cluster refused {op} with TRYAGAIN for {} ms (the store \
                             timeout): its slot is migrating; retry",
                            self.inner.timeout.as_millis()
                        )));
                    }
                    tracing::debug!(op, "slot migrating (TRYAGAIN); retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(TRYAGAIN_PAUSE_MAX);
                }
                Ok(Err(e)) => {
                    self.suspect(&e);
                    return Err(
                        if broken && (e.is_connection_dropped() || e.is_io_error()) {
                            Error::Unavailable(format!("Redis connection broken twice during {op}"))
                        } else {
                            classify(op, e)
                        },
                    );
                }
                Err(_) => {
                    self.inner.follow.notify_one();
                    return Err(timed_out(op, self.inner.timeout));
                }
            }
        }
    }

    pub(crate) async fn acquire(&self, spec: &GrantSpec) -> Result<Acquired> {
        let floor = self.inner.high_water.load(Ordering::Relaxed).to_string();
        let k = self.keys(&spec.name);
        let queued = if spec.queued { "1" } else { "0" }.to_owned();
        let queue_life = QUEUE_LIFETIME.as_millis().to_string();
        let (script, keys, args) = if spec.limit > 1 {
            (
                &self.inner.scripts.semaphore_acquire,
                [
                    k.permits.as_str(),
                    k.queue.as_str(),
                    k.alive.as_str(),
                    k.lease.as_str(),
                    k.fences.as_str(),
                ],
                vec![
                    spec.token.clone(),
                    spec.ttl_ms.to_string(),
                    spec.holder.clone(),
                    floor,
                    spec.limit.to_string(),
                    self.channel(&spec.name, Event::Granted),
                    queued,
                    queue_life,
                ],
            )
        } else {
            (
                &self.inner.scripts.acquire,
                [
                    k.lease.as_str(),
                    k.queue.as_str(),
                    k.alive.as_str(),
                    k.permits.as_str(),
                    k.fences.as_str(),
                ],
                vec![
                    spec.token.clone(),
                    spec.ttl_ms.to_string(),
                    spec.holder.clone(),
                    floor,
                    spec.lock_delay_ms.to_string(),
                    self.channel(&spec.name, Event::Granted),
                    queued,
                    queue_life,
                ],
            )
        };
        let reply: Vec<Value> = if self.inner.replica_acks == 0 {
            self.eval("acquire", script, &keys, &args).await?
        } else {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(key);
            }
            for arg in &args {
                invocation.arg(arg);
            }
            let mut pipe = redis::pipe();
            pipe.invoke_script(&invocation);
            let (mut replies, acks) = self.pipeline_acknowledged("acquire", script, pipe).await?;
            let reply = match replies.pop() {
                Some(Value::Array(reply)) => reply,
                other => return Err(Error::Internal(format!("acquire reply: {other:?}"))),
            };
            if let Err(e) = self.check_acks(acks) {
                if int(&reply, 0)? == 1 {
                    // Not on enough replicas: a failover could forget it and
                    // grant its fence again. Take it back; report no grant.
                    let _ = self.release(&spec.name, &spec.token).await;
                }
                return Err(e);
            }
            reply
        };
        let acquired = acquire_reply(&reply)?;
        self.saw_fence(match &acquired {
            Acquired::Granted { fence, .. } => *fence,
            Acquired::Blocked(blocked) => blocked.fence,
        });
        Ok(acquired)
    }

    pub(crate) async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        let NameKeys { queue, alive, .. } = self.keys(name);
        let args = [token.to_owned(), self.channel(name, Event::Released)];
        let _: i64 = self
            .eval(
                "dequeue",
                &self.inner.scripts.dequeue,
                &[&queue, &alive],
                &args,
            )
            .await?;
        Ok(())
    }

    /// Renews the places of `tokens` (this broker's waiters on `name`) in
    /// the line: one `refresh.lua` run per [`REFRESH_BATCH`] tokens, one
    /// after the other. Each token's rank (0: first in line), or `None` when
    /// it has no place.
    pub(crate) async fn refresh_places(
        &self,
        name: &str,
        tokens: &[String],
    ) -> Result<Vec<Option<u64>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let NameKeys { queue, alive, .. } = self.keys(name);
        let life = QUEUE_LIFETIME.as_millis().to_string();
        let mut ranks = Vec::with_capacity(tokens.len());
        for batch in tokens.chunks(REFRESH_BATCH) {
            let mut args = Vec::with_capacity(batch.len() + 1);
            args.push(life.clone());
            args.extend(batch.iter().cloned());
            let batch: Vec<Value> = self
                .eval(
                    "refresh",
                    &self.inner.scripts.refresh,
                    &[&queue, &alive],
                    &args,
                )
                .await?;
            for i in 0..batch.len() {
                let rank = int(&batch, i)?;
                ranks.push(u64::try_from(rank).ok());
            }
        }
        if ranks.len() != tokens.len() {
            return Err(Error::Internal(format!(
                "{} ranks for {} places",
                ranks.len(),
                tokens.len()
            )));
        }
        Ok(ranks)
    }

    pub(crate) async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        let ttl = ttl_ms.unwrap_or(0).to_string();
        if self.is_cluster() {
            return self.renew_one_key(name, token, ttl).await;
        }
        if self.inner.replica_acks > 0 {
            let item = RenewItem {
                name: name.to_owned(),
                token: token.to_owned(),
                ttl_ms,
            };
            return self
                .renew_many(std::slice::from_ref(&item))
                .await?
                .pop()
                .ok_or_else(|| Error::Internal("no renewal outcome".into()));
        }
        self.renew_one("renew", name, token, ttl).await
    }

    /// What became of `token`'s lease, without extending it (renew.lua
    /// with a TTL of -1).
    pub(crate) async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        if self.is_cluster() {
            return self.renew_one_key(name, token, "-1".to_owned()).await;
        }
        self.renew_one("check", name, token, "-1".to_owned()).await
    }

    async fn renew_one(
        &self,
        op: &'static str,
        name: &str,
        token: &str,
        ttl: String,
    ) -> Result<Checked<Renewed>> {
        let args = [token.to_owned(), ttl];
        let k = self.keys(name);
        let reply: Vec<Value> = self
            .eval(
                op,
                &self.inner.scripts.renew,
                &[&k.lease, &k.permits],
                &args,
            )
            .await?;
        self.renewal(&reply)
    }

    /// Renews every item in one round trip: a pipeline of `EVALSHA
    /// renew_many`, one run per [`RENEW_BATCH`] leases.
    pub(crate) async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        if self.is_cluster() {
            return self.renew_many_in_cluster(items).await;
        }
        let script = &self.inner.scripts.renew_many;
        let mut pipe = redis::pipe();
        for batch in items.chunks(RENEW_BATCH) {
            let mut invocation = script.prepare_invoke();
            for item in batch {
                let k = self.keys(&item.name);
                invocation
                    .key(k.lease)
                    .key(k.permits)
                    .arg(&item.token)
                    .arg(item.ttl_ms.unwrap_or(0));
            }
            pipe.invoke_script(&invocation);
        }
        let replies = self.renewals_sent(script, pipe).await?;
        let mut outcomes = Vec::with_capacity(items.len());
        for batch in replies {
            outcomes.extend(self.renewals(batch)?);
        }
        if outcomes.len() != items.len() {
            return Err(Error::Internal(format!(
                "{} outcomes for {} renewals",
                outcomes.len(),
                items.len()
            )));
        }
        Ok(outcomes)
    }

    /// Sends a pipeline of renew_many.lua runs, followed by `WAIT` when
    /// replicas must acknowledge (UNAVAILABLE if too few did).
    async fn renewals_sent(&self, script: &Script, pipe: redis::Pipeline) -> Result<Vec<Value>> {
        if self.inner.replica_acks == 0 {
            return self.pipeline("renew_many", script, &pipe).await;
        }
        let (replies, acks) = self
            .pipeline_acknowledged("renew_many", script, pipe)
            .await?;
        self.check_acks(acks)?;
        Ok(replies)
    }

    /// Reads one run of renew_many.lua: an outcome per lease it renewed.
    fn renewals(&self, batch: Value) -> Result<Vec<Checked<Renewed>>> {
        let Value::Array(batch) = batch else {
            return Err(Error::Internal(format!("renew_many reply: {batch:?}")));
        };
        batch
            .into_iter()
            .map(|reply| match reply {
                Value::Array(reply) => self.renewal(&reply),
                other => Err(Error::Internal(format!("renew reply: {other:?}"))),
            })
            .collect()
    }

    /// [`RedisStore::renew_many`] on a cluster: every lease renewed apart
    /// ([`RedisStore::renew_one_key`]): a script naming several leases of a
    /// slot is refused (TRYAGAIN) while a migration has moved some of them
    /// and not others. The slots are renewed at once (the cluster
    /// connection routes each to its node); the leases of one slot one
    /// after another, because redis-rs 1.8's cluster connection stops
    /// answering after many requests are redirected (ASK, MOVED) at the same
    /// moment, as all the leases of a migrating slot would be. Names have
    /// their own hash tags, so a slot rarely holds more than one lease.
    async fn renew_many_in_cluster(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        let mut slots: std::collections::HashMap<_, Vec<usize>> = Default::default();
        for (i, item) in items.iter().enumerate() {
            let slot = redis::cluster_routing::Slot::for_key(self.key(&item.name));
            slots.entry(slot).or_default().push(i);
        }
        let runs = slots.into_values().map(|indices| async move {
            let mut renewed = Vec::with_capacity(indices.len());
            for i in indices {
                let item = &items[i];
                renewed.push((
                    i,
                    self.renew_one_key(
                        &item.name,
                        &item.token,
                        item.ttl_ms.unwrap_or(0).to_string(),
                    )
                    .await?,
                ));
            }
            Ok::<_, Error>(renewed)
        });
        let mut outcomes: Vec<Option<Checked<Renewed>>> = items.iter().map(|_| None).collect();
        for run in futures_util::future::join_all(runs).await {
            for (i, outcome) in run? {
                outcomes[i] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.ok_or_else(|| Error::Internal("a renewal without an outcome".into())))
            .collect()
    }

    /// Renews one lease of a cluster with one-key scripts: the lock form
    /// (the lease hash), then, only if the name has no lock lease, the
    /// permit form (the permits hash). While a slot migrates, Redis refuses
    /// a script declaring several keys of it with TRYAGAIN whenever the node
    /// has some of them and not all; renew.lua declares the permits hash,
    /// which a plain lock never has, so every renewal of the slot would be
    /// refused for the whole migration, and holders would lose their leases
    /// to a migration longer than their TTL. A one-key script is served
    /// wherever its key is (redis-rs follows the ASK). One round trip for a
    /// lock, two for a semaphore permit.
    async fn renew_one_key(
        &self,
        name: &str,
        token: &str,
        ttl: String,
    ) -> Result<Checked<Renewed>> {
        let k = self.keys(name);
        let args = [token.to_owned(), ttl];
        let scripts = &self.inner.scripts;
        let reply = self.renew_key(&scripts.renew_lock, &k.lease, &args).await?;
        if int(&reply, 0)? != 3 {
            return self.renewal(&reply);
        }
        let reply = self
            .renew_key(&scripts.renew_permit, &k.permits, &args)
            .await?;
        self.renewal(&reply)
    }

    /// Runs a one-key renewal script on a cluster, followed by `WAIT` when
    /// replicas must acknowledge. `ASKING` goes first, in the same write:
    /// where the key has moved to a node importing its slot, that node
    /// serves the script only right after an `ASKING` on the same
    /// connection. redis-rs sends its own `ASKING` when it follows an ASK,
    /// but as a request of its own: with many renewals redirected at once on
    /// the shared connection, another's script can come between and use it
    /// up, and the script is then refused (MOVED). Elsewhere `ASKING` is a
    /// no-op.
    async fn renew_key(&self, script: &Script, key: &str, args: &[String]) -> Result<Vec<Value>> {
        let mut invocation = script.prepare_invoke();
        invocation.key(key);
        for arg in args {
            invocation.arg(arg);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").ignore();
        pipe.invoke_script(&invocation);
        match self.renewals_sent(script, pipe).await?.pop() {
            Some(Value::Array(reply)) => Ok(reply),
            other => Err(Error::Internal(format!("renew reply: {other:?}"))),
        }
    }

    /// Sends a pipeline of invocations of `script` in one round trip, within
    /// the store timeout. A pipeline does not load scripts by itself (after a
    /// Redis restart): on NOSCRIPT it loads the script and sends again.
    async fn pipeline(
        &self,
        op: &'static str,
        script: &Script,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>> {
        self.retrying(op, |mut conn| async move {
            match pipe.query_async(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    script.prepare_invoke().load_async(&mut conn).await?;
                    pipe.query_async(&mut conn).await
                }
                other => other,
            }
        })
        .await
    }

    /// Runs `pipe` followed by `WAIT replicas timeout` on the same
    /// connection (WAIT counts the writes of its own connection); returns the
    /// replies of `pipe` and the number of replicas that acknowledged.
    async fn pipeline_acknowledged(
        &self,
        op: &'static str,
        script: &Script,
        mut pipe: redis::Pipeline,
    ) -> Result<(Vec<Value>, i64)> {
        pipe.cmd("WAIT")
            .arg(self.inner.replica_acks)
            .arg(self.inner.replica_ack_timeout.as_millis() as u64);
        let mut replies = self.pipeline(op, script, &pipe).await?;
        match replies.pop() {
            Some(Value::Int(acks)) => Ok((replies, acks)),
            other => Err(Error::Internal(format!("WAIT reply: {other:?}"))),
        }
    }

    /// UNAVAILABLE unless `acks` replicas acknowledged.
    fn check_acks(&self, acks: i64) -> Result<()> {
        if acks >= i64::from(self.inner.replica_acks) {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "only {acks} of the {} Redis replicas required (--replica-acks) acknowledged the write \
             within {} ms; not granted or renewed, so that a failover cannot undo it",
            self.inner.replica_acks,
            self.inner.replica_ack_timeout.as_millis()
        )))
    }

    /// Reads a renew.lua reply.
    fn renewal(&self, reply: &[Value]) -> Result<Checked<Renewed>> {
        self.saw_fence(uint(reply, 2)?);
        renew_reply(reply)
    }

    pub(crate) async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        let k = self.keys(name);
        let args = [token.to_owned(), self.channel(name, Event::Released)];
        let reply: Vec<Value> = self
            .eval(
                "release",
                &self.inner.scripts.release,
                &[&k.lease, &k.permits, &k.queue, &k.alive],
                &args,
            )
            .await?;
        release_reply(&reply)
    }

    pub(crate) async fn revoke(&self, name: &str) -> Result<Revocation> {
        let key = self.key(name);
        let args = [self.channel(name, Event::Released)];
        let reply: Vec<Value> = self
            .eval("revoke", &self.inner.scripts.revoke, &[&key], &args)
            .await?;
        let fence = uint(&reply, 1)?;
        Ok(match int(&reply, 0)? {
            1 => Revocation::Revoked { fence },
            2 => Revocation::Already { fence },
            0 => Revocation::NotHeld,
            other => return Err(Error::Internal(format!("revoke reply code {other}"))),
        })
    }

    pub(crate) async fn describe(&self, name: &str) -> Result<Described> {
        let k = self.keys(name);
        let reply: Vec<Value> = self
            .eval(
                "describe",
                &self.inner.scripts.describe,
                &[&k.lease, &k.alive, &k.permits],
                &[],
            )
            .await?;
        self.saw_fence(uint(&reply, 1)?);
        if int(&reply, 0)? == 0 {
            return Ok(Described {
                lease: None,
                lock_delay_remaining_ms: uint(&reply, 2)?,
                waiters: uint(&reply, 3)?,
                permits: uint(&reply, 4)?,
            });
        }
        Ok(Described {
            waiters: uint(&reply, 7)?,
            permits: uint(&reply, 8)?,
            lease: Some(LeaseInfo {
                fence: uint(&reply, 1)?,
                remaining_ms: uint(&reply, 2)?,
                holder: text(&reply, 3)?,
                granted_at_unix_ms: uint(&reply, 4)?,
                ttl_ms: uint(&reply, 5)?,
                lock_delay_ms: uint(&reply, 6)?,
            }),
            lock_delay_remaining_ms: 0,
        })
    }

    /// The pub/sub channel of `event` of `name`; watches are keyed by it.
    pub(crate) fn channel(&self, name: &str, event: Event) -> String {
        format!("{}:{}", self.key(name), event.suffix())
    }

    /// PINGs the script connection and reads the server clock (`TIME`, the
    /// clock scripts and key expiry use) on the subscription connection:
    /// checks Redis, and makes a broken connection reconnect (and
    /// resubscribe) even when no request is using it. The subscription
    /// connection stays on one server (the primary; in a Cluster, one node
    /// until it fails), so successive readings come from one clock.
    pub(crate) async fn ping(&self) -> Result<super::ClockReading> {
        let mut conn = self.conn()?;
        let mut sub = self
            .inner
            .subscriber
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Error::Unavailable("no Redis subscription connection yet".into()))?;
        let ping = redis::cmd("PING");
        let time = async {
            let sent = std::time::Instant::now();
            let (secs, micros): (u64, u64) = self
                .call("ping", redis::cmd("TIME").query_async(&mut sub))
                .await?;
            Ok(super::ClockReading {
                store_unix_us: secs.saturating_mul(1_000_000).saturating_add(micros),
                sent,
                received: std::time::Instant::now(),
            })
        };
        let (a, b) = tokio::join!(self.call("ping", ping.query_async::<()>(&mut conn)), time);
        if b.is_err() {
            // The subscription node may be gone (Cluster): find another.
            self.inner.follow.notify_one();
        }
        a.and(b)
    }
}

/// The keys of one name; all share its hash tag, hence its Cluster slot.
struct NameKeys {
    /// The lease hash: `{prefix}{name}`.
    lease: String,
    /// The wait line (a sorted set, token -> arrival sequence: line.lua).
    /// Brokers before issue 15 kept a list under `:queue` instead: new
    /// names, so that old and new brokers side by side during a rollout
    /// never read each other's structure (each keeps its own line; the
    /// lease itself is shared, so mutual exclusion holds throughout).
    queue: String,
    /// The places of the line (a sorted set, token -> ms deadline); before
    /// issue 15, `:alive`.
    alive: String,
    /// The semaphore permits (a hash).
    permits: String,
    /// The fence counter of the name's slot (shared with other names).
    fences: String,
}

/// The fence counter of the name whose lease key is `lease` (see
/// [`RedisStore::fence_counter`]).
fn fence_counter_key(prefix: &str, lease: &str, cluster: bool) -> String {
    if !cluster {
        return format!("{prefix}fences");
    }
    let tag = slot_tags()
        .get(&redis::cluster_routing::Slot::for_key(lease))
        .map_or("", String::as_str);
    format!("{prefix}{{{tag}}}:fences")
}

/// For each Cluster hash slot, a short hash tag that maps to it: the fence
/// counter of a slot is `{prefix}{tag}:fences`. Computed once (about 170,000
/// CRC16s of short strings, a few milliseconds), only for Cluster stores.
fn slot_tags() -> &'static std::collections::HashMap<redis::cluster_routing::Slot, String> {
    static TAGS: std::sync::OnceLock<
        std::collections::HashMap<redis::cluster_routing::Slot, String>,
    > = std::sync::OnceLock::new();
    TAGS.get_or_init(|| {
        const SLOTS: usize = 16_384;
        let mut tags = std::collections::HashMap::with_capacity(SLOTS);
        let mut n = 0u64;
        while tags.len() < SLOTS {
            let tag = format!("{n:x}");
            tags.entry(redis::cluster_routing::Slot::for_key(&tag))
                .or_insert(tag);
            n += 1;
        }
        tags
    })
}

/// `{prefix}{name}`: the braces make `name` the Redis Cluster hash tag.
pub fn lease_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{name}}}")
}

/// Serves subscribe and unsubscribe requests in the order they were made,
/// on the subscription connection it was last given: when the primary moves
/// (Sentinel), the new connection is subscribed to every channel watched
/// now, and every watch looks again (events during the move went unseen).
async fn run_subscriptions(
    mut requests: mpsc::UnboundedReceiver<SubscriptionRequest>,
    mut switches: mpsc::UnboundedReceiver<ConnectionManager>,
    timeout: Duration,
    watchers: Watchers,
) {
    let mut conn: Option<ConnectionManager> = None;
    let mut channels = std::collections::HashSet::new();
    // Once nobody can send another connection (one server: the first was
    // the last), only requests are served.
    let mut more_switches = true;
    loop {
        let switch = async {
            if more_switches {
                switches.recv().await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            // A move first: later requests go to the new primary.
            biased;
            switched = switch => {
                let Some(mut new) = switched else {
                    more_switches = false;
                    continue;
                };
                if conn.is_some() {
                    for channel in &channels {
                        if let Err(e) = bounded("subscribe", timeout, new.subscribe(channel)).await {
                            // The manager resubscribes when it reconnects.
                            tracing::debug!(error = %e, "resubscribing on the new primary failed");
                        }
                    }
                    watchers.wake_all();
                }
                conn = Some(new);
            }
            request = requests.recv() => {
                let Some(request) = request else { return };
                match request {
                    SubscriptionRequest::Subscribe(channel, ack) => {
                        let result = match &mut conn {
                            Some(conn) => bounded("subscribe", timeout, conn.subscribe(&channel)).await,
                            None => Err(Error::Unavailable(
                                "no Redis primary known yet: the sentinels have not named one".into(),
                            )),
                        };
                        if result.is_ok() {
                            channels.insert(channel);
                        }
                        let _ = ack.send(result);
                    }
                    SubscriptionRequest::Unsubscribe(channel) => {
                        channels.remove(&channel);
                        if let Some(conn) = &mut conn {
                            if let Err(e) = bounded("unsubscribe", timeout, conn.unsubscribe(&channel)).await {
                                // Harmless: a stray subscription only delivers
                                // wake-ups nobody waits for, and is gone at the
                                // next reconnection.
                                tracing::debug!(error = %e, "unsubscribe failed");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Follows the primary of a Sentinel store: asks the sentinels every
/// [`FOLLOW_INTERVAL`] and when a failed call suggests a failover; when the
/// primary moved, connects there and hands the new subscription connection
/// to the subscription task. Ends with the store.
async fn follow_primary(
    store: Weak<Inner>,
    connector: Arc<Connector>,
    switches: mpsc::UnboundedSender<ConnectionManager>,
) {
    let mut current: Option<(String, u16)> = None;
    let mut failing = false;
    let client = {
        let connector = Arc::clone(&connector);
        move |info: redis::ConnectionInfo| connector.client(info)
    };
    loop {
        let Some(inner) = store.upgrade() else { return };
        let Topology::Sentinel(sentinel) = &inner.topology else {
            return;
        };
        let ask = inner.timeout.min(Duration::from_millis(500));
        match sentinel.primary(ask, &client).await {
            Ok(primary) if current.as_ref() != Some(&primary) => {
                let made = sentinel.node_info(&primary.0, primary.1).and_then(|info| {
                    let conn = connector.commands(info.clone());
                    let sub = connector.subscriber(info);
                    conn.and_then(|c| sub.map(|s| (c, s)))
                        .map_err(|e| Error::Internal(format!("connecting to the primary: {e}")))
                });
                match made {
                    Ok((conn, sub)) => {
                        tracing::info!(
                            master = sentinel.master(),
                            primary = %format!("{}:{}", primary.0, primary.1),
                            previous = ?current.as_ref().map(|(h, p)| format!("{h}:{p}")),
                            "Redis primary (named by Sentinel)"
                        );
                        *inner.conn.write().unwrap_or_else(|e| e.into_inner()) =
                            Some(Conn::Single(conn));
                        *inner.subscriber.write().unwrap_or_else(|e| e.into_inner()) =
                            Some(sub.clone());
                        let _ = switches.send(sub);
                        current = Some(primary);
                        failing = false;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot connect to the primary Sentinel named")
                    }
                }
            }
            Ok(_) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot learn the Redis primary from Sentinel");
                }
                failing = true;
            }
        }
        next_look(inner).await;
    }
}

/// Waits for the next look of a topology follower: a failed call's
/// wake-up, or [`FOLLOW_INTERVAL`]; and at least [`FOLLOW_GAP`] after this
/// one, since during an outage many calls fail. `inner` is let go before
/// the gap, so that a store dropped meanwhile ends its follower.
async fn next_look(inner: Arc<Inner>) {
    let asked = tokio::time::Instant::now();
    tokio::select! {
        () = inner.follow.notified() => {}
        () = tokio::time::sleep(FOLLOW_INTERVAL) => {}
    }
    drop(inner);
    tokio::time::sleep_until(asked + FOLLOW_GAP).await;
}

/// Keeps the subscription of a Cluster store on a live node: checks it
/// every [`FOLLOW_INTERVAL`] and when a health check fails, and moves it to
/// the first seed node that answers when it does not. Ends with the store.
async fn follow_nodes(
    store: Weak<Inner>,
    connector: Arc<Connector>,
    switches: mpsc::UnboundedSender<ConnectionManager>,
) {
    let mut current = 0;
    let mut failing = false;
    loop {
        let Some(inner) = store.upgrade() else { return };
        let Topology::Cluster(cluster) = &inner.topology else {
            return;
        };
        let subscriber = inner
            .subscriber
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let alive = match subscriber {
            Some(mut sub) => bounded(
                "ping",
                inner.timeout,
                redis::cmd("PING").query_async::<()>(&mut sub),
            )
            .await
            .is_ok(),
            None => false,
        };
        if !alive {
            let n = cluster.seeds.len();
            let start = current + 1;
            let mut moved = false;
            for i in (start..start + n).map(|i| i % n) {
                let Ok(mut sub) = connector.subscriber(cluster.seeds[i].clone()) else {
                    continue;
                };
                let ping = redis::cmd("PING");
                if bounded("ping", inner.timeout, ping.query_async::<()>(&mut sub))
                    .await
                    .is_ok()
                {
                    tracing::info!(
                        node = %cluster.seeds[i].addr(),
                        "Redis Cluster: subscribing for release events on this node"
                    );
                    *inner.subscriber.write().unwrap_or_else(|e| e.into_inner()) =
                        Some(sub.clone());
                    let _ = switches.send(sub);
                    current = i;
                    moved = true;
                    failing = false;
                    break;
                }
            }
            if !moved && !failing {
                tracing::warn!(
                    "Redis Cluster: no seed node answers; waiters fall back to their timers"
                );
                failing = true;
            }
        }
        next_look(inner).await;
    }
}

async fn bounded<T>(
    op: &'static str,
    timeout: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(classify(op, e)),
        Err(_) => Err(timed_out(op, timeout)),
    }
}

fn timed_out(op: &str, timeout: Duration) -> Error {
    Error::Unavailable(format!(
        "Redis did not answer {op} within {} ms (the store timeout)",
        timeout.as_millis()
    ))
}

/// A reply we cannot read is our bug; anything else (connection refused,
/// reset, LOADING, READONLY after a failover...) is the store being
/// unavailable, which a retry may cure.
fn classify(op: &str, e: RedisError) -> Error {
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::InvalidClientConfig => {
            Error::Internal(format!("Redis {op}: {e}"))
        }
        _ => Error::Unavailable(format!("Redis is unavailable ({op}: {e})")),
    }
}

/// Reads an acquire.lua / semaphore_acquire.lua reply.
pub(crate) fn acquire_reply(reply: &[Value]) -> Result<Acquired> {
    let fence = uint(reply, 1)?;
    // Optional: absent from the replies that found no expired lease.
    let expired = |i| uint(reply, i).map_or(0, |n| n as u32);
    let by = match int(reply, 0)? {
        1 => {
            return Ok(Acquired::Granted {
                fence,
                expired: expired(5),
            })
        }
        0 => BlockedBy::Holder,
        2 => BlockedBy::LockDelay,
        3 => BlockedBy::Queue,
        other => return Err(Error::Internal(format!("acquire reply code {other}"))),
    };
    Ok(Acquired::Blocked(Blocked {
        by,
        fence,
        remaining_ms: uint(reply, 2)?,
        holder: text(reply, 3)?,
        position: uint(reply, 5)?,
        queued: uint(reply, 6)?,
        expired: expired(7),
    }))
}

/// Reads a renew.lua reply.
pub(crate) fn renew_reply(reply: &[Value]) -> Result<Checked<Renewed>> {
    let fence = uint(reply, 2)?;
    Ok(match int(reply, 0)? {
        1 => Checked::Done(Renewed {
            ttl_ms: uint(reply, 1)?,
            fence,
        }),
        other => ended(other, fence)
            .ok_or_else(|| Error::Internal(format!("renew reply code {other}")))?,
    })
}

/// Reads a release.lua reply.
pub(crate) fn release_reply(reply: &[Value]) -> Result<Checked<()>> {
    let fence = uint(reply, 1)?;
    Ok(match int(reply, 0)? {
        1 => Checked::Done(()),
        2 => Checked::Released,
        other => ended(other, fence)
            .ok_or_else(|| Error::Internal(format!("release reply code {other}")))?,
    })
}

/// The codes renew_lease.lua and release.lua share for a lease that is not
/// (or no longer) the caller's.
fn ended<T>(code: i64, fence: u64) -> Option<Checked<T>> {
    Some(match code {
        0 => Checked::NotHeld,
        -1 => Checked::NotOwner { fence },
        -2 => Checked::Revoked { fence },
        -3 => Checked::Expired,
        -4 => Checked::Released,
        _ => return None,
    })
}

fn field(reply: &[Value], i: usize) -> Result<&Value> {
    reply
        .get(i)
        .ok_or_else(|| Error::Internal(format!("script reply has no element {i}: {reply:?}")))
}

fn int(reply: &[Value], i: usize) -> Result<i64> {
    match field(reply, i)? {
        Value::Int(n) => Ok(*n),
        other => Err(Error::Internal(format!(
            "script reply element {i} is not an integer: {other:?}"
        ))),
    }
}

fn uint(reply: &[Value], i: usize) -> Result<u64> {
    // PTTL can answer -1/-2 in a race with expiry: no time left.
    Ok(int(reply, i)?.max(0) as u64)
}

fn text(reply: &[Value], i: usize) -> Result<String> {
    match field(reply, i)? {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Nil => Ok(String::new()),
        other => Err(Error::Internal(format!(
            "script reply element {i} is not a string: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_put_the_name_in_a_cluster_hash_tag() {
        assert_eq!(
            lease_key("leasehold:", "jobs/nightly"),
            "leasehold:{jobs/nightly}"
        );
        assert_eq!(lease_key("p:", "a/b"), "p:{a/b}");
    }

    /// On a Cluster each slot has its own fence counter, in that slot (so a
    /// grant script stays single-slot): 16,384 keys at most, whatever the
    /// number of names.
    #[test]
    fn every_slot_has_a_fence_counter_tag_in_that_slot() {
        use redis::cluster_routing::Slot;
        let tags = slot_tags();
        assert_eq!(tags.len(), 16_384);
        for (slot, tag) in tags {
            assert_eq!(Slot::for_key(format!("leasehold:{{{tag}}}:fences")), *slot);
        }
        for name in ["a", "jobs/nightly", "t|x", "3f2"] {
            let lease = lease_key("leasehold:", name);
            let counter = fence_counter_key("leasehold:", &lease, true);
            assert_eq!(Slot::for_key(&counter), Slot::for_key(&lease), "{name}");
        }
        assert_eq!(
            fence_counter_key("leasehold:", "leasehold:{a}", false),
            "leasehold:fences"
        );
    }

    /// A random value tree, as a broken or hostile Redis could answer.
    fn random_value(bytes: &mut impl Iterator<Item = u8>, depth: u32) -> Value {
        match bytes.next().unwrap_or(0) % 6 {
            0 => Value::Nil,
            1 => Value::Int(i64::from(bytes.next().unwrap_or(0) as i8) * 1_000_003),
            2 => Value::BulkString(bytes.take(3).collect()),
            3 => Value::SimpleString("OK".into()),
            4 if depth < 3 => {
                let n = bytes.next().unwrap_or(0) % 9;
                Value::Array((0..n).map(|_| random_value(bytes, depth + 1)).collect())
            }
            _ => Value::Okay,
        }
    }

    /// Property: whatever Redis answers, reading it gives a result or an
    /// internal error, never a panic; and well-formed replies read right.
    #[test]
    fn script_replies_are_read_without_panicking() {
        let mut seed = vec![0u8; 64 * 1024];
        getrandom::fill(&mut seed).unwrap();
        let mut bytes = seed.into_iter();
        for _ in 0..5_000 {
            let reply = match random_value(&mut bytes, 0) {
                Value::Array(items) => items,
                other => vec![other],
            };
            let _ = acquire_reply(&reply);
            let _ = renew_reply(&reply);
        }
        let granted = [
            Value::Int(1),
            Value::Int(42),
            Value::Int(1_000),
            Value::BulkString(vec![]),
            Value::Int(7),
            Value::Int(7),
        ];
        assert_eq!(
            acquire_reply(&granted).unwrap(),
            Acquired::Granted {
                fence: 42,
                expired: 7
            }
        );
        let mut queued = [3, 9, 250, 0, 0, 2, 5].map(Value::Int);
        queued[3] = Value::BulkString(Vec::new());
        let Acquired::Blocked(blocked) = acquire_reply(&queued).unwrap() else {
            panic!("not blocked")
        };
        assert_eq!(
            (
                blocked.by,
                blocked.remaining_ms,
                blocked.position,
                blocked.queued
            ),
            (BlockedBy::Queue, 250, 2, 5)
        );
        assert_eq!(
            renew_reply(&[-2, 0, 9].map(Value::Int)).unwrap(),
            Checked::Revoked { fence: 9 }
        );
        assert!(matches!(
            renew_reply(&[7, 0, 9].map(Value::Int)),
            Err(Error::Internal(_))
        ));
    }

    #[test]
    fn unreadable_replies_are_internal_errors_not_outages() {
        assert!(matches!(int(&[Value::Nil], 0), Err(Error::Internal(_))));
        assert!(matches!(int(&[], 0), Err(Error::Internal(_))));
        assert_eq!(uint(&[Value::Int(-2)], 0).unwrap(), 0);
    }
}
