//! How the store reaches Redis: the connections it makes (TLS, timeouts,
//! Nagle off, the RESP3 subscription connection that wakes watches), the
//! topology it follows, and how one Redis call is bounded by the store
//! timeout and its failure classified, so that a dead Redis never hangs a
//! request and a retryable outage is told apart from a bug.

use std::{future::Future, sync::Arc, time::Duration};

use redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    Client, ErrorKind, ProtocolVersion, PushInfo, RedisError, Value,
};

use super::{cluster::ClusterTarget, sentinel::SentinelTarget, subscribe::deliver_push, Inner};
use crate::{
    error::{Error, Result},
    store::{watch::Watchers, StoreOptions},
};

/// The connection scripts run on.
#[derive(Clone)]
pub(super) enum Conn {
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
pub(super) enum Topology {
    /// A fixed address.
    Single,
    /// The primary is whatever the sentinels name.
    Sentinel(Arc<SentinelTarget>),
    /// Cluster nodes: the subscription moves between them.
    Cluster(Arc<ClusterTarget>),
}

/// How often a topology follower looks again (a Sentinel store asks the
/// sentinels which server is primary; a Cluster store checks its
/// subscription node), besides right after a failed call.
pub(super) const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest time between two such looks.
const FOLLOW_GAP: Duration = Duration::from_millis(50);

/// Waits for the next look of a topology follower: a failed call's
/// wake-up, or [`FOLLOW_INTERVAL`]; and at least [`FOLLOW_GAP`] after this
/// one, since during an outage many calls fail. `inner` is let go before
/// the gap, so that a store dropped meanwhile ends its follower.
pub(super) async fn next_look(inner: Arc<Inner>) {
    let asked = tokio::time::Instant::now();
    tokio::select! {
        () = inner.follow.notified() => {}
        () = tokio::time::sleep(FOLLOW_INTERVAL) => {}
    }
    drop(inner);
    tokio::time::sleep_until(asked + FOLLOW_GAP).await;
}

/// Makes the store's connections, with its TLS settings and timeouts.
pub(super) struct Connector {
    tls_ca: Option<Vec<u8>>,
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
    timeout: Duration,
    watchers: Watchers,
}

impl Connector {
    pub(super) fn new(options: &StoreOptions, watchers: Watchers) -> Self {
        Connector {
            tls_ca: options.tls_ca.clone(),
            tls_client: options.tls_client.clone(),
            timeout: options.timeout,
            watchers,
        }
    }

    /// A client for `info`: with a private CA or a client certificate for
    /// rediss://, otherwise the URL alone (rediss:// then verifies against
    /// the system's roots).
    pub(super) fn client(&self, info: redis::ConnectionInfo) -> redis::RedisResult<Client> {
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

    /// The command connection's settings. A call that times out leaves
    /// the connection in place (a response timeout is no reason to
    /// reconnect for redis-rs; only a connection found dropped is
    /// replaced), so the orphan cleanup's release (lease/orphans.rs) goes
    /// out on the same connection after the timed-out script, and Redis
    /// runs one connection's commands in order: a script delayed on its
    /// way is granted first and released after, never granted after its
    /// release (tests/orphans.rs, the Redis delayed-request test). A
    /// connection is replaced once Redis, or the path to it, has closed it
    /// (nothing still on its way on it is then run), or on a reply that
    /// cannot be read (a bug, INTERNAL: the one case where a script still
    /// in flight could run after a release sent on the new one). Unlike
    /// PostgreSQL's pooled connections (postgres/deadline.rs), nothing
    /// bounds when a delayed script may run, and nothing needs to.
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
    pub(super) fn cluster(
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
    pub(super) fn commands(
        &self,
        info: redis::ConnectionInfo,
    ) -> redis::RedisResult<ConnectionManager> {
        ConnectionManager::new_lazy_with_config(self.client(nodelay(info))?, self.config())
    }

    /// The subscription connection: RESP3, so that subscriptions and PINGs
    /// share it; pushed messages wake the watches of their channel
    /// ([`deliver_push`]), and the manager resubscribes by itself after a
    /// reconnection.
    pub(super) fn subscriber(
        &self,
        info: redis::ConnectionInfo,
    ) -> redis::RedisResult<ConnectionManager> {
        let info = nodelay(info);
        let resp3 = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3),
        );
        let pushed = self.watchers.clone();
        let on_push = move |push: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
            deliver_push(&pushed, &push);
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
pub(super) fn nodelay(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true))
}

/// Runs one Redis call under the store timeout, its failure classified.
pub(super) async fn bounded<T>(
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

pub(super) fn timed_out(op: &str, timeout: Duration) -> Error {
    crate::store::timed_out("Redis", op, timeout)
}

/// A reply we cannot read is our bug; anything else (connection refused,
/// reset, LOADING, READONLY after a failover...) is the store being
/// unavailable, which a retry may cure.
#[expect(
    clippy::needless_pass_by_value,
    reason = "called as map_err(|e| classify(op, e)): the error is given away"
)]
pub(super) fn classify(op: &str, e: RedisError) -> Error {
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::InvalidClientConfig => {
            Error::Internal(format!("Redis {op}: {e}"))
        }
        _ => Error::Unavailable(format!("Redis is unavailable ({op}: {e})")),
    }
}
