//! What the bench reads of a ZooKeeper store (`--store zookeeper://...`):
//! where its server listens (for its CPU and RSS, from /proc: `probe`) and
//! a killed holder's lease as the store keeps it (`cycles`' failovers).
//!
//! A lease's node (`<chroot>/<key prefix>/n/<bucket>/<name>/lock`,
//! `server/src/store/zookeeper/layout.rs`) holds its TTL, and its `mtime`
//! is the leader's time of the grant or the last renewal: the lease ends
//! `ttl_ms` after it (`records::judge`). The leader's clock is this
//! machine's (the server runs here, as in every bench run), so the expiry
//! is read to the ms, and a new holder's grant time is its node's `mtime`
//! before anything renews it.

use leasehold_server::store::zookeeper::{
    layout::{segment, NamePaths},
    records::Holding,
    ZooKeeperUrl,
};
use zookeeper_client as zk;

/// The port of the first member of a `zookeeper://` URL (its server's
/// listening port, when it runs here); `None` for another store or a
/// member without a port.
pub fn store_port(url: &str) -> Option<u16> {
    if !url.starts_with("zookeeper://") {
        return None;
    }
    let parsed = ZooKeeperUrl::parse(url).ok()?;
    let (_, port) = parsed.hosts.first()?.rsplit_once(':')?;
    port.parse().ok()
}

/// A session of the bench's own on a ZooKeeper store's ensemble, to read
/// its lease nodes.
#[derive(Clone)]
pub struct ZooKeeper {
    client: zk::Client,
    /// The URL's chroot (`/leasehold` unless it names one).
    chroot: String,
}

impl ZooKeeper {
    /// A session on the ensemble of a ZooKeeper store URL (with its
    /// credentials, if any); `None` for another store.
    pub async fn for_store(url: &str) -> Result<Option<Self>, String> {
        if !url.starts_with("zookeeper://") {
            return Ok(None);
        }
        let parsed = ZooKeeperUrl::parse(url).map_err(|e| e.to_string())?;
        let mut connector = zk::Client::connector();
        if let Some((user, password)) = &parsed.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = connector
            .connect(&parsed.connect_string())
            .await
            .map_err(|e| format!("cannot reach ZooKeeper at {}: {e}", parsed.connect_string()))?;
        Ok(Some(ZooKeeper {
            client,
            chroot: parsed.chroot,
        }))
    }

    /// The lock node of `name` in the store of `key_prefix` (the broker's
    /// `--key-prefix`: a node of its own under the chroot, as the store
    /// opens it).
    fn lock_path(&self, key_prefix: &str, name: &str) -> String {
        let root = if key_prefix.is_empty() {
            self.chroot.clone()
        } else {
            format!("{}/{}", self.chroot, segment(key_prefix))
        };
        format!(
            "{root}{}",
            NamePaths::new(name, zookeeper_client::Acls::anyone_all()).lock()
        )
    }

    /// The lock lease of `name`: its record and when it was granted or last
    /// renewed (the leader's clock, ms); `None` when the name is not held.
    async fn lock(&self, key_prefix: &str, name: &str) -> Result<Option<(Holding, f64)>, String> {
        let path = self.lock_path(key_prefix, name);
        match self.client.get_data(&path).await {
            Ok((data, stat)) => {
                let holding = Holding::decode(&data, &path).map_err(|e| e.to_string())?;
                // Milliseconds of the leader's clock: exact as f64.
                #[allow(clippy::cast_precision_loss)]
                Ok(Some((holding, stat.mtime as f64)))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(format!("ZooKeeper get {path}: {e}")),
        }
    }

    /// When the lock lease of `name` ends (the leader's clock, ms): its
    /// last renewal plus its TTL; `None` when the name is not held.
    pub async fn expiry_ms(&self, key_prefix: &str, name: &str) -> Result<Option<f64>, String> {
        #[allow(clippy::cast_precision_loss)]
        Ok(self
            .lock(key_prefix, name)
            .await?
            .map(|(holding, renewed)| renewed + holding.ttl_ms as f64))
    }

    /// When the lock lease of `name` was last written: its grant, for a
    /// lease nothing renewed yet; `None` when the name is not held.
    pub async fn written_ms(&self, key_prefix: &str, name: &str) -> Result<Option<f64>, String> {
        Ok(self.lock(key_prefix, name).await?.map(|(_, at)| at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_the_first_members() {
        assert_eq!(store_port("zookeeper://127.0.0.1:2181"), Some(2181));
        assert_eq!(
            store_port("zookeeper://u:p@ss@h1:2182,h2:2181/locks"),
            Some(2182)
        );
        assert_eq!(store_port("zookeeper://[::1]:2190/locks"), Some(2190));
        assert_eq!(store_port("etcd://127.0.0.1:2181"), None);
        assert_eq!(store_port("redis://127.0.0.1:2181"), None);
    }
}
