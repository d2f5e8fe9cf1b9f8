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
//!
//! This module holds the store's operations, each thin: it builds the call
//! of its script, runs it through the one call path
//! ([`RedisStore::run`], in `scripts`), and turns the script's typed reply
//! (`replies`) into the store's types. Beside it: `keys` (the keys of a
//! name), `list` (the walk of a listing: SCAN, then describe),
//! `connect` (connections, TLS, timeouts, error classes),
//! `subscribe` (the subscription task), `sentinel` and `cluster` (reading
//! their URLs, and following the primary or a live node).

mod cluster;
mod connect;
mod keys;
mod list;
mod record;
mod replies;
mod scripts;
mod sentinel;
mod subscribe;

use std::{
    future::Future,
    sync::{Arc, RwLock},
    time::Duration,
};

use redis::{aio::ConnectionManager, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind};
use tokio::sync::{mpsc, Notify};

pub(crate) use self::replies::{acquire_reply, release_reply, renew_reply};
pub(crate) use self::{cluster::ClusterTarget, sentinel::SentinelTarget};
use self::{
    connect::{bounded, Conn, Connector, Topology},
    keys::{HashSlot, NameKeys},
    replies::{LockRenewal, Renewals},
    scripts::{only, scripts},
};
pub use self::{
    keys::lease_key,
    record::{read_record, LeaseRecord},
    scripts::{RecordFormat, SCRIPTS, SCRIPT_CONSTANTS},
};
use super::{
    backend::Backend,
    contract::{ttl_arg, TTL_KEEP, TTL_LOOK},
    watch::Watchers,
    Acquired, Checked, ClockReading, Described, Event, GrantSpec, Ping, RenewItem, Renewed,
    Revocation, StoreOptions, QUEUE_LIFETIME,
};
use crate::error::{Error, Result};

/// Most leases renewed by one run of `renew_many.lua`. Redis runs nothing
/// else while a script runs: a bound keeps each run well under a millisecond
/// (a heartbeat naming more leases becomes several runs, still in one round
/// trip).
const RENEW_BATCH: usize = 250;

/// Most places renewed by one run of `refresh.lua`: a bound on how long
/// Redis runs nothing else (about a millisecond). More waiters of one name
/// on one broker become several runs, one after the other and not in one
/// pipeline: Redis serves a client's whole pipeline before anyone else's,
/// and 10,000 places in one would hold up every other call (a handoff
/// among them) for tens of milliseconds once a second.
const REFRESH_BATCH: usize = 250;

/// What the clones of one store share: its connections, where it finds
/// its servers, and its settings.
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
    prefix: String,
    timeout: Duration,
    /// Replicas that must acknowledge each grant and renewal (WAIT), and how
    /// long to wait for them; 0: no WAIT.
    replica_acks: u32,
    replica_ack_timeout: Duration,
    /// The format of the lease records this broker writes (it reads both).
    record_format: RecordFormat,
    /// Whether the scripts run as the functions of a library (`FCALL`);
    /// false once Redis refused functions (`scripts::Library`).
    functions: std::sync::atomic::AtomicBool,
    watchers: Watchers,
}

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
        let connector = Arc::new(Connector::new(options, watchers.clone()));
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
                prefix: options.key_prefix.clone(),
                timeout: options.timeout,
                replica_acks: options.replica_acks,
                replica_ack_timeout: options.replica_ack_timeout,
                record_format: options.record_format,
                functions: std::sync::atomic::AtomicBool::new(true),
                watchers: watchers.clone(),
            }),
        };
        if let Some(subscriber) = subscriber {
            let _ = switches.send(subscriber);
        }
        tokio::spawn(subscribe::run_subscriptions(
            requests_rx,
            switches_rx,
            options.timeout,
            watchers,
        ));
        match &store.inner.topology {
            Topology::Single => {}
            Topology::Sentinel(_) => {
                tokio::spawn(sentinel::follow_primary(
                    Arc::downgrade(&store.inner),
                    connector,
                    switches,
                ));
            }
            Topology::Cluster(_) => {
                tokio::spawn(cluster::follow_nodes(
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    fn key(&self, name: &str) -> String {
        lease_key(&self.inner.prefix, name)
    }

    fn keys(&self, name: &str) -> NameKeys {
        NameKeys::new(&self.inner.prefix, name, self.is_cluster())
    }

    /// Runs one Redis call (not a script: see [`RedisStore::run`]) under
    /// the store timeout.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        bounded(op, self.inner.timeout, fut).await
    }

    /// Runs one of the two acquire scripts, which differ in their first key
    /// (the lease record or the permits) and their fifth argument (the
    /// lock-delay or the limit).
    async fn acquire(
        &self,
        script: &scripts::Script<Acquired>,
        spec: &GrantSpec,
        floor: u64,
        keys: [&String; 5],
        fifth: String,
    ) -> Result<Acquired> {
        let queued = if spec.queued { "1" } else { "0" }.to_owned();
        let queue_life = QUEUE_LIFETIME.as_millis().to_string();
        let floor = floor.to_string();
        let args = [
            spec.token.clone(),
            spec.ttl_ms.to_string(),
            spec.holder.clone(),
            floor,
            fifth,
            self.channel(&spec.name, Event::Granted),
            queued,
            queue_life,
        ];
        let call = script.call("acquire").run(&keys, &args);
        let ran = self.run(call.acknowledged()).await?;
        let acquired = only("acquire", ran.replies)?;
        if let Err(e) = ran.acks {
            if matches!(acquired, Acquired::Granted { .. }) {
                // Not on enough replicas: a failover could forget it and
                // grant its fence again. Take it back; report no grant.
                let _ = self.release(&spec.name, &spec.token).await;
            }
            return Err(e);
        }
        Ok(acquired)
    }

    async fn renew_one(
        &self,
        op: &'static str,
        name: &str,
        token: &str,
        ttl: String,
    ) -> Result<Checked<Renewed>> {
        let k = self.keys(name);
        let call = scripts(self.inner.record_format)
            .renew
            .call(op)
            .run(&[&k.lease, &k.permits], &[token, &ttl]);
        let renewal = only(op, self.run(call).await?.replies)?;
        Ok(renewal.outcome)
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
            let slot = HashSlot::for_key(self.key(&item.name));
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
                        item.ttl_ms.map_or(TTL_KEEP, ttl_arg).to_string(),
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
    /// (the lease record), then, only if the name has no lock lease, the
    /// permit form (the permits hash). While a slot migrates, Redis refuses
    /// a script declaring several keys of it with TRYAGAIN whenever the node
    /// has some of them and not all; renew.lua declares the permits hash,
    /// which a plain lock never has, so every renewal of the slot would be
    /// refused for the whole migration, and holders would lose their leases
    /// to a migration longer than their TTL. A one-key script is served
    /// wherever its key is (redis-rs follows the ASK). One round trip for a
    /// lock, two for a semaphore permit.
    ///
    /// The permit form runs also when the lock form says another token
    /// holds the name: a name is a lock or a semaphore at a time, but over
    /// time both, and this token may be a permit that expired or was
    /// released before the lock's grant, whose holder must hear its own end
    /// (expired, reported, released), not "another owner" (which a
    /// KeepAlive session counts as a store that lost its data). The lock's
    /// answer stands when the permits know nothing of the token either: a
    /// second round trip for a stranger's token only (renew.lua does both
    /// looks in one script).
    async fn renew_one_key(
        &self,
        name: &str,
        token: &str,
        ttl: String,
    ) -> Result<Checked<Renewed>> {
        let k = self.keys(name);
        let args = [token, &ttl];
        let call = scripts(self.inner.record_format)
            .renew_lock
            .call("renew_many")
            .run(&[&k.lease], &args);
        let another_owner = match self.run_one_key(call).await? {
            LockRenewal::Renewal(renewal) => {
                let outcome = renewal.outcome;
                if !matches!(outcome, Checked::NotOwner { .. }) {
                    return Ok(outcome);
                }
                Some(outcome)
            }
            LockRenewal::NotALock => None,
        };
        let call = scripts(self.inner.record_format)
            .renew_permit
            .call("renew_many")
            .run(&[&k.permits], &args);
        let renewal = self.run_one_key(call).await?;
        Ok(match (renewal.outcome, another_owner) {
            (Checked::NotHeld, Some(not_owner)) => not_owner,
            (outcome, _) => outcome,
        })
    }

    /// Runs a one-key renewal script on a cluster: `ASKING` first (see
    /// [`scripts::Call::asking`]), `WAIT` after when replicas must
    /// acknowledge.
    async fn run_one_key<R: replies::Reply>(&self, call: scripts::Call<'_, R>) -> Result<R> {
        let replies = self
            .run(call.asking().acknowledged())
            .await?
            .acknowledged()?;
        only("renew_many", replies)
    }
}

impl Backend for RedisStore {
    /// acquire.lua.
    async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let k = self.keys(&spec.name);
        let keys = [&k.lease, &k.queue, &k.alive, &k.permits, &k.fences];
        let delay = spec.lock_delay_ms.to_string();
        self.acquire(
            &scripts(self.inner.record_format).acquire,
            spec,
            floor,
            keys,
            delay,
        )
        .await
    }

    /// semaphore_acquire.lua.
    async fn acquire_permit(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let k = self.keys(&spec.name);
        let keys = [&k.permits, &k.queue, &k.alive, &k.lease, &k.fences];
        let limit = spec.limit.to_string();
        self.acquire(
            &scripts(self.inner.record_format).semaphore_acquire,
            spec,
            floor,
            keys,
            limit,
        )
        .await
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        let ttl = ttl_ms.map_or(TTL_KEEP, ttl_arg).to_string();
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

    /// Renews every item in one round trip: a pipeline of `EVALSHA
    /// renew_many`, one run per [`RENEW_BATCH`] leases, followed by `WAIT`
    /// when replicas must acknowledge (UNAVAILABLE if too few did).
    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        if self.is_cluster() {
            return self.renew_many_in_cluster(items).await;
        }
        let mut call = scripts(self.inner.record_format)
            .renew_many
            .call("renew_many")
            .acknowledged();
        for batch in items.chunks(RENEW_BATCH) {
            let mut keys = Vec::with_capacity(2 * batch.len());
            let mut args = Vec::with_capacity(2 * batch.len());
            for item in batch {
                // The two keys the script reads, not all five of NameKeys.
                let lease = self.key(&item.name);
                let permits = keys::permits_key(&lease);
                keys.extend([lease, permits]);
                args.extend([
                    item.token.clone(),
                    item.ttl_ms.map_or(TTL_KEEP, ttl_arg).to_string(),
                ]);
            }
            call = call.run(&keys, &args);
        }
        let outcomes: Vec<_> = self
            .run(call)
            .await?
            .acknowledged()?
            .into_iter()
            .flat_map(|Renewals(batch)| batch)
            .map(|renewal| renewal.outcome)
            .collect();
        Ok(outcomes)
    }

    /// What became of `token`'s lease, without extending it (renew.lua
    /// with a TTL of `TTL_LOOK`).
    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        if self.is_cluster() {
            return self.renew_one_key(name, token, TTL_LOOK.to_string()).await;
        }
        self.renew_one("check", name, token, TTL_LOOK.to_string())
            .await
    }

    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        let k = self.keys(name);
        let args = [token.to_owned(), self.channel(name, Event::Released)];
        let keys = [&k.lease, &k.permits, &k.queue, &k.alive];
        let call = scripts(self.inner.record_format)
            .release
            .call("release")
            .run(&keys, &args);
        only("release", self.run(call).await?.replies)
    }

    async fn revoke(&self, name: &str) -> Result<Revocation> {
        let args = [self.channel(name, Event::Released)];
        let call = scripts(self.inner.record_format)
            .revoke
            .call("revoke")
            .run(&[self.key(name)], &args);
        only("revoke", self.run(call).await?.replies)
    }

    /// One `SCAN` of about `budget` keys and the describes of the names
    /// it found (see `list.rs`).
    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(super::Listing, u64)> {
        self.list_page(prefix, resume, budget).await
    }

    async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        let k = self.keys(name);
        let keys = [&k.lease, &k.alive, &k.permits];
        let call = scripts(self.inner.record_format)
            .describe
            .call("describe")
            .run(&keys, &[] as &[&str]);
        let description = only("describe", self.run(call).await?.replies)?;
        Ok((description.described, description.fence))
    }

    async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        let NameKeys { queue, alive, .. } = self.keys(name);
        let args = [token.to_owned(), self.channel(name, Event::Released)];
        let call = scripts(self.inner.record_format)
            .dequeue
            .call("dequeue")
            .run(&[queue, alive], &args);
        self.run(call).await?;
        Ok(())
    }

    /// Renews the places of `tokens` (this broker's waiters on `name`) in
    /// the line: one `refresh.lua` run per [`REFRESH_BATCH`] tokens, one
    /// after the other. Each token's rank (0: first in line), or `None` when
    /// it has no place.
    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let NameKeys { queue, alive, .. } = self.keys(name);
        let life = QUEUE_LIFETIME.as_millis().to_string();
        let mut ranks = Vec::with_capacity(tokens.len());
        for batch in tokens.chunks(REFRESH_BATCH) {
            let args: Vec<&str> = [life.as_str()]
                .into_iter()
                .chain(batch.iter().map(String::as_str))
                .collect();
            let call = scripts(self.inner.record_format)
                .refresh
                .call("refresh")
                .run(&[&queue, &alive], &args);
            ranks.extend(only("refresh", self.run(call).await?.replies)?.0);
        }
        Ok(ranks)
    }

    fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    /// The pub/sub channel of `event` of `name`; watches are keyed by it.
    fn channel(&self, name: &str, event: Event) -> String {
        format!("{}:{}", self.key(name), event.suffix())
    }

    /// PINGs the script connection and reads the server clock (`TIME`, the
    /// clock scripts and key expiry use) and `INFO` on the subscription
    /// connection: checks Redis, and makes a broken connection reconnect
    /// (and resubscribe) even when no request is using it. The subscription
    /// connection stays on one server (the primary; in a Cluster, one node
    /// until it fails), so successive readings come from one clock, and
    /// `INFO` describes the server the scripts run on (in a Cluster: one
    /// node, taken as the others' twin).
    ///
    /// `INFO` (its default sections), not `CONFIG GET`: managed services
    /// that block CONFIG answer INFO. A server that answers it with an
    /// error (an ACL without `info`) leaves the settings unread, said in
    /// the log, not a failed ping. A replica (`role:slave`) fails the ping:
    /// every script would fail READONLY there. Not in a Cluster, whose
    /// subscription node may well be a replica; its scripts go to the
    /// primaries.
    async fn ping(&self) -> Result<Ping> {
        let mut conn = self.conn()?;
        let mut sub = self
            .inner
            .subscriber
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| Error::Unavailable("no Redis subscription connection yet".into()))?;
        let ping = redis::cmd("PING");
        let time = async {
            let sent = std::time::Instant::now();
            let (secs, micros): (u64, u64) = self
                .call("ping", redis::cmd("TIME").query_async(&mut sub))
                .await?;
            Ok(ClockReading {
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
        a?;
        let clock = b?;
        let info = redis::cmd("INFO");
        let info =
            match tokio::time::timeout(self.inner.timeout, info.query_async::<String>(&mut sub))
                .await
            {
                Ok(Ok(text)) => super::safety::redis_info(&text),
                // The server refused the command (an ACL, a renamed command),
                // the connection is fine: the settings stay unknown.
                Ok(Err(e)) if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                    super::safety::RedisInfo {
                        settings: super::safety::Settings {
                            findings: Vec::new(),
                            unread: Some(format!("Redis refused INFO: {e}")),
                        },
                        replica: false,
                    }
                }
                Ok(Err(e)) => return Err(connect::classify("info", e)),
                Err(_) => return Err(connect::timed_out("info", self.inner.timeout)),
            };
        if info.replica && !self.is_cluster() {
            self.inner.follow.notify_one();
            return Err(Error::Unavailable(
                "Redis there is a replica (INFO role:slave): it takes no writes; point --store \
                 at the primary, or use redis+sentinel:// to follow it"
                    .into(),
            ));
        }
        Ok(Ping {
            clock: Some(clock),
            settings: info.settings,
        })
    }
}
