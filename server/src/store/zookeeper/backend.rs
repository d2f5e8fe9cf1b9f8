//! The ZooKeeper store behind `--store zookeeper://...`: the lease
//! operations of [`ZooKeeper`] (`leases.rs`, `list.rs`) and its watches
//! (`subscribe.rs`), through the one seam every store implements.

use std::{sync::Arc, time::Instant};

use tokio::sync::mpsc;

use super::{layout::segment, subscribe, ZooKeeper};
use crate::{
    error::Result,
    store::{
        backend::Backend, contract::QUEUE_LIFETIME, watch::Watchers, Acquired, Checked,
        ClockReading, Described, Event, GrantSpec, Listing, Ping, RenewItem, Renewed, Revocation,
        StoreOptions, Watch,
    },
};

/// A ZooKeeper ensemble as the broker's store. Cheap to clone.
#[derive(Clone)]
pub struct ZooKeeperStore {
    inner: Arc<Inner>,
}

struct Inner {
    zk: Arc<ZooKeeper>,
    watchers: Watchers,
}

impl ZooKeeperStore {
    /// The store of `url` (`zookeeper://...`), not yet connected (the
    /// first call connects). Its nodes live under the URL's chroot, in a
    /// node named after `--key-prefix` (so that, as on Redis and
    /// PostgreSQL, one flag keeps deployments sharing an ensemble apart).
    ///
    /// The session timeout asked for is the wait line's lifetime
    /// ([`QUEUE_LIFETIME`]): a dead broker's places in line go with its
    /// session (servers clamp it to 2 to 20 of their ticks).
    pub fn open(url: &str, options: &StoreOptions) -> Result<Self> {
        let mut zk = ZooKeeper::open(url, QUEUE_LIFETIME, options.timeout)?;
        zk.use_tls(
            options.tls_ca.as_deref(),
            options
                .tls_client
                .as_ref()
                .map(|(cert, key)| (cert.as_slice(), key.as_slice())),
        )?;
        if !options.key_prefix.is_empty() {
            zk.url.chroot = format!("{}/{}", zk.url.chroot, segment(&options.key_prefix));
        }
        let zk = Arc::new(zk);
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(requests));
        tokio::spawn(subscribe::run(
            Arc::clone(&zk),
            watchers.clone(),
            requests_rx,
        ));
        tokio::spawn(super::places::run(Arc::downgrade(&zk)));
        tokio::spawn(super::sweep::run(Arc::downgrade(&zk)));
        Ok(ZooKeeperStore {
            inner: Arc::new(Inner { zk, watchers }),
        })
    }

    fn zk(&self) -> &ZooKeeper {
        &self.inner.zk
    }

    /// `call`, one store operation, within the store timeout as a whole:
    /// an operation is several requests (a `sync`, reads, a tick, a multi,
    /// retries when the name changed), each bounded by the timeout too, so
    /// that without this bound one call could take several timeouts. A
    /// request cut short may still be applied, as one that timed out by
    /// itself: UNAVAILABLE, the outcome unknown, which a retry with the
    /// same token resolves (it finds its own lease).
    async fn within<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let timeout = self.zk().timeout;
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| crate::store::timed_out("ZooKeeper", what, timeout))?
    }
}

impl Backend for ZooKeeperStore {
    async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        self.within("an acquire", self.zk().acquire(spec, floor))
            .await
    }

    async fn acquire_permit(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        self.within("an acquire", self.zk().acquire(spec, floor))
            .await
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        self.within("a renewal", self.zk().renew(name, token, ttl_ms))
            .await
    }

    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        self.within("renewals", self.zk().renew_many(items)).await
    }

    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        self.within("a check", self.zk().check(name, token)).await
    }

    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        self.within("a release", self.zk().release(name, token))
            .await
    }

    async fn revoke(&self, name: &str) -> Result<Revocation> {
        self.within("a revoke", self.zk().revoke(name)).await
    }

    async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        self.within("a describe", self.zk().describe(name)).await
    }

    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        self.within("a listing", self.zk().list(prefix, resume, budget))
            .await
    }

    async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        self.within("a dequeue", self.zk().dequeue(name, token))
            .await
    }

    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        self.within(
            "a refresh of places",
            self.zk().refresh_places(name, tokens),
        )
        .await
    }

    fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    fn channel(&self, name: &str, event: Event) -> String {
        crate::store::watch::name_channel(name, event)
    }

    /// As every store's, within the store timeout: a watch ZooKeeper does
    /// not confirm in time fails UNAVAILABLE.
    async fn watch(&self, name: &str, event: Event, waiter: Option<&str>) -> Result<Watch> {
        let timeout = self.zk().timeout;
        tokio::time::timeout(
            timeout,
            self.watchers().watch(&self.channel(name, event), waiter),
        )
        .await
        .map_err(|_| crate::store::timed_out("ZooKeeper", "a watch", timeout))?
    }

    /// A write to the store's clock node: it fails while no quorum takes
    /// writes, and its stamp is the leader's clock.
    async fn ping(&self) -> Result<Ping> {
        let sent = Instant::now();
        let stamp = self.within("a ping", self.zk().tick()).await?;
        let received = Instant::now();
        Ok(Ping {
            clock: Some(ClockReading {
                store_unix_us: stamp.unix_ms.saturating_mul(1_000),
                sent,
                received,
            }),
            settings: crate::store::safety::Settings::default(),
        })
    }
}
