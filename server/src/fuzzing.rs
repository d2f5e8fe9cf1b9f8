//! Entry points for the fuzz targets in `fuzz/`, not an API: thin wrappers
//! over the parsers of untrusted input that are private to their modules
//! (the auth file, store URLs, Lua script replies), so that fuzzing them
//! needs no change of their visibility elsewhere. Request validation is
//! public already ([`crate::lease::validate`]).

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::{
    auth::Auth,
    store::{self, Acquired, Checked, ClusterTarget, Renewed, SentinelTarget},
    Result,
};

pub use redis::Value;

/// Reads an auth file's bytes as the broker reads the file.
pub fn auth_file(bytes: &[u8]) -> std::result::Result<Auth, String> {
    Auth::parsed(bytes)
}

/// Reads an acquire.lua / semaphore_acquire.lua reply.
pub fn acquire_reply(reply: &[Value]) -> Result<Acquired> {
    store::acquire_reply(reply)
}

/// Reads a renew.lua reply.
pub fn renew_reply(reply: &[Value]) -> Result<Checked<Renewed>> {
    store::renew_reply(reply)
}

/// Reads a release.lua reply.
pub fn release_reply(reply: &[Value]) -> Result<Checked<()>> {
    store::release_reply(reply)
}

/// A store URL as `RedisStore::open` reads it, before connecting.
#[derive(Debug)]
pub enum StoreUrl {
    /// `redis://`, `rediss://`: redis-rs reads it.
    Single(ConnectionInfo),
    /// `redis+sentinel://`: the sentinels as written and as connection
    /// infos, the master's name, and the data nodes' connection info (for a
    /// primary at 127.0.0.1:6379).
    Sentinel {
        /// The `Debug` of the target (which must not show the password).
        debug: String,
        /// `(host:port as written, its connection info)` per sentinel.
        sentinels: Vec<(String, ConnectionInfo)>,
        /// The master's name.
        master: String,
        /// How a data node is reached.
        node: ConnectionInfo,
    },
    /// `redis+cluster://`: the seed nodes.
    Cluster {
        /// The `Debug` of the target (which must not show the password).
        debug: String,
        /// One connection info per seed node.
        seeds: Vec<ConnectionInfo>,
    },
    /// `etcd://`, `etcds://`: the members, as `EtcdStore::open` reads them.
    Etcd {
        /// The `Debug` of the target (which must not show the password).
        debug: String,
        /// TLS (`etcds://`).
        tls: bool,
        /// The user, if any, and whether a password came with it.
        user: Option<(String, bool)>,
        /// The members' `host:port`, in order.
        endpoints: Vec<String>,
    },
    /// `zookeeper://`: the ensemble's members, the chroot and the digest
    /// user (the store being built, issue 34).
    ZooKeeper {
        /// The `Debug` of the target (which must not show the password).
        debug: String,
        /// The members' `host:port`, in order.
        hosts: Vec<String>,
        /// The store's root.
        chroot: String,
        /// The digest user, if any.
        user: Option<String>,
        /// Whether it speaks TLS (`zookeepers://`).
        tls: bool,
    },
}

/// Reads a store URL (`--store`) as `RedisStore::open` or
/// `EtcdStore::open` does, before connecting.
pub fn store_url(url: &str) -> Result<StoreUrl> {
    if url.starts_with("zookeeper://") || url.starts_with("zookeepers://") {
        let target = store::zookeeper::ZooKeeperUrl::parse(url)?;
        return Ok(StoreUrl::ZooKeeper {
            debug: format!("{target:?}"),
            user: target.digest.as_ref().map(|(user, _)| user.clone()),
            hosts: target.hosts,
            chroot: target.chroot,
            tls: target.tls,
        });
    }
    if url.starts_with("etcd://") || url.starts_with("etcds://") {
        let target = store::EtcdUrl::parse(url)?;
        return Ok(StoreUrl::Etcd {
            debug: format!("{target:?}"),
            tls: target.tls,
            user: target
                .credentials
                .map(|(user, password)| (user, !password.is_empty())),
            endpoints: target.endpoints,
        });
    }
    if let Some(target) = SentinelTarget::parse(url)? {
        let sentinels = target
            .sentinels()
            .iter()
            .map(|s| Ok((s.clone(), target.sentinel_info(s)?)))
            .collect::<Result<_>>()?;
        return Ok(StoreUrl::Sentinel {
            debug: format!("{target:?}"),
            sentinels,
            master: target.master().to_owned(),
            node: target.node_info("127.0.0.1", 6379)?,
        });
    }
    if let Some(target) = ClusterTarget::parse(url)? {
        return Ok(StoreUrl::Cluster {
            debug: format!("{target:?}"),
            seeds: target.seeds,
        });
    }
    url.into_connection_info()
        .map(StoreUrl::Single)
        .map_err(|e| crate::Error::InvalidArgument(format!("bad Redis URL: {e}")))
}
