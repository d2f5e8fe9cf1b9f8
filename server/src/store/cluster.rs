//! Redis Cluster: the seed nodes of a `redis+cluster://` URL.
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

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::url::MultiHost;
use crate::error::{Error, Result};

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
