//! Redis Cluster: the seed nodes of a `redis+cluster://` URL, and the
//! follower that keeps the store's subscription on a live node.
//!
//! Scripts go through redis-rs' cluster connection, which routes each by its
//! first key's slot and follows MOVED and ASK (every key of a name shares the
//! name's hash tag, so one script touches one slot). Release and grant
//! events are PUBLISHed as before: Redis Cluster forwards a PUBLISH to every
//! node, so the store subscribes on one live node of its choice, and moves
//! to another when that one stops answering.
//!
//! URL: `redis+cluster://[user:password@]host:port[,host:port...]`
//! (`rediss+cluster://` for TLS). List several nodes: they are where the
//! store starts, and where it looks for another subscription node.

use std::sync::{Arc, Weak};

use redis::{aio::ConnectionManager, ConnectionInfo, IntoConnectionInfo};
use tokio::sync::mpsc;

use super::{
    connect::{bounded, next_look, Connector, Topology},
    Inner,
};
use crate::{
    error::{Error, Result},
    store::url::MultiHost,
};

/// The seed nodes of a cluster.
pub struct ClusterTarget {
    /// One connection info per seed node (user and password included).
    pub seeds: Vec<ConnectionInfo>,
}

impl std::fmt::Debug for ClusterTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        let seeds: Vec<String> = self.seeds.iter().map(|s| s.addr().to_string()).collect();
        f.debug_struct("ClusterTarget")
            .field("seeds", &seeds)
            .finish()
    }
}

impl ClusterTarget {
    /// Reads a `redis+cluster://` or `rediss+cluster://` URL; `None` for any
    /// other scheme.
    pub fn parse(url: &str) -> Result<Option<Self>> {
        let Some(parsed) = MultiHost::parse(url, "cluster", "node") else {
            return Ok(None);
        };
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "bad Cluster URL: {why}; write redis+cluster://[user:password@]host:port[,host:port...] (rediss+ for TLS)"
            ))
        };
        let MultiHost {
            scheme,
            userinfo,
            hosts,
            path,
        } = parsed.map_err(|why| bad(&why))?;
        if !matches!(path, None | Some("" | "0")) {
            return Err(bad("a cluster has only database 0"));
        }
        let seeds = hosts
            .into_iter()
            .map(|host| {
                format!("{scheme}://{userinfo}{host}")
                    .into_connection_info()
                    .map_err(|e| bad(&e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(ClusterTarget { seeds }))
    }
}

/// Keeps the subscription of a Cluster store on a live node: checks it
/// every [`FOLLOW_INTERVAL`](super::connect::FOLLOW_INTERVAL) and when a
/// health check fails, and moves it to the first seed node that answers
/// when it does not. Ends with the store.
pub(super) async fn follow_nodes(
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                    *inner
                        .subscriber
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sub.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_list_seed_nodes() {
        let t = ClusterTarget::parse("redis+cluster://:pw@10.0.0.1:7000,n2:7001/")
            .unwrap()
            .unwrap();
        assert_eq!(t.seeds.len(), 2);
        assert_eq!(t.seeds[1].redis_settings().password(), Some("pw"));
        assert!(!format!("{t:?}").contains("pw"));
        assert!(ClusterTarget::parse("redis://h:1").unwrap().is_none());
        for (url, want) in [
            ("redis+cluster://", "no node address"),
            ("redis+cluster://n1", "has no port"),
            ("redis+cluster://n1:7000/3", "only database 0"),
        ] {
            let e = ClusterTarget::parse(url).unwrap_err().to_string();
            assert!(e.contains(want), "{url}: {e}");
        }
    }
}
