//! The ZooKeeper store (`--store zookeeper://...`, `zookeepers://` for
//! TLS; the design is docs/design/zookeeper.md, section 9 what was built).
//! This module is what every operation stands on:
//!
//! * reaching the ensemble ([`ZooKeeper::client`]): lazily, so that a
//!   broker starts (and reports NOT_SERVING) while ZooKeeper is down; under
//!   the URL's chroot, created if absent; a new session when the last one
//!   expired (a broker cut off longer than its session timeout); as the
//!   URL's digest user, whose nodes no other client may touch
//!   ([`ZooKeeper::acls`]); over TLS for `zookeepers://`
//!   ([`ZooKeeper::use_tls`]);
//! * the store's clock ([`ZooKeeper::tick`]): ZooKeeper shows clients no
//!   clock but the time its leader stamps on a write (`mtime`), so the
//!   clock is read by writing: how the Redis store reads `TIME`, with the
//!   leader's wall clock in place of Redis's;
//! * fences ([`ZooKeeper::fence`]): a zxid is `epoch << 32 | counter`, and a
//!   new leader starts a new epoch with the counter at 0, so a zxid alone
//!   rises across leader changes but jumps by 2^32 at each, and starts over
//!   when the data is wiped. A fence is the epoch's base plus the counter
//!   (the low 32 bits); each epoch's base is written once, by the first
//!   broker that meets the epoch, above every fence the epochs before could
//!   have given (their base + 2^32), the broker's highest fence seen and its
//!   wall clock in µs. So fences rise per name across leader changes,
//!   restarts and a wipe, as the etcd store's do (its epoch key).
//!
//! The lease operations are in `leases.rs` and `list.rs`, the watches in
//! `subscribe.rs`, the places in line in `places.rs`, the sweep of ended
//! leases in `sweep.rs`, and the seam in `backend.rs`.
//!
//! Errors: a connection lost, a request timed out or a session expired is
//! UNAVAILABLE (the request may have been applied: what the store's
//! callers already take an UNAVAILABLE to mean); anything else ZooKeeper
//! refuses is an internal error naming the request.

mod backend;
pub mod layout;
mod leases;
mod list;
mod places;
pub mod records;
mod subscribe;
mod sweep;
pub mod url;

use std::{
    collections::BTreeMap,
    sync::{Mutex, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use zookeeper_client as zk;

pub use self::{backend::ZooKeeperStore, url::ZooKeeperUrl};
use crate::error::{Error, Result};

/// The node the clock is read by writing to (under the chroot).
const CLOCK: &str = "/clock";

/// A TTL node written at each new session, to find out that the servers
/// take TTL nodes (collected a second after, by ZooKeeper).
const TTL_PROBE: &str = "/ttl-probe";

/// The parent of each epoch's fence base, `/fences/<epoch, 8 hex digits>`.
const FENCES: &str = "/fences";

/// How far apart two epochs' bases are at least: no epoch has more than
/// 2^32 zxids (ZooKeeper forces a new epoch when the counter runs out), so
/// a base this far above the one before is above every fence of it.
const EPOCH_SPAN: u64 = 1 << 32;

/// A time ZooKeeper's leader stamped on a write, and that write's zxid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The leader's wall clock, in ms since the Unix epoch.
    pub unix_ms: u64,
    /// The write's zxid.
    pub zxid: i64,
}

impl Stamp {
    /// The write's epoch (the leader's term).
    pub fn epoch(&self) -> u32 {
        epoch_of(self.zxid)
    }
}

/// The epoch of a zxid: its high 32 bits.
pub fn epoch_of(zxid: i64) -> u32 {
    // A zxid is never negative; its high half is the epoch.
    u32::try_from(zxid.cast_unsigned() >> 32).unwrap_or(u32::MAX)
}

/// A ZooKeeper ensemble as the store reaches it.
pub struct ZooKeeper {
    url: ZooKeeperUrl,
    /// The session timeout asked for (the servers clamp it to 2 to 20
    /// ticks).
    session_timeout: Duration,
    /// A store call slower than this fails with UNAVAILABLE.
    timeout: Duration,
    /// The session in use; `None` before the first call, and after a
    /// session ended. Held across the connect, so that concurrent callers
    /// wait for one session rather than open one each.
    client: tokio::sync::Mutex<Option<zk::Client>>,
    /// The fence bases met, and the highest zxid seen.
    bases: Mutex<Bases>,
    /// How many times a fence base was read from ZooKeeper (once per epoch
    /// and session, as [`Bases`] says; see [`ZooKeeper::base_reads`]).
    base_reads: std::sync::atomic::AtomicU64,
    /// Held while a fence base is read, so that concurrent calls read it
    /// once.
    base_loading: tokio::sync::Mutex<()>,
    /// The last leader stamp received, and when (this process's monotonic
    /// clock): what a look that writes nothing estimates the leader's
    /// time from (Describe's time left: an estimate, never a verdict).
    last_stamp: Mutex<Option<(records::LeaderTime, std::time::Instant)>>,
    /// The places in line this broker took, which lapse unless refreshed
    /// (`places.rs`).
    places: places::Places,
    /// TLS to the servers (`zookeepers://`), set by [`ZooKeeper::use_tls`].
    tls: Option<zk::TlsOptions>,
}

/// The fence base of each epoch met (few in a cluster's life), for the
/// session in use: a wipe (or a URL that now reaches another ensemble)
/// restarts the epochs at the same numbers with bases of their own, and
/// always ends the session (the servers do not know it), so a new session
/// forgets the bases known. (Zxids going back are no sign of a wipe: the
/// answers of concurrent calls are taken in any order, and a lease's fence
/// is its grant's zxid, older than most seen since.)
#[derive(Default)]
struct Bases {
    by_epoch: BTreeMap<u32, u64>,
}

impl ZooKeeper {
    /// The ensemble of `url` (`zookeeper://...`), not yet connected: the
    /// first call connects.
    pub fn open(url: &str, session_timeout: Duration, timeout: Duration) -> Result<Self> {
        Ok(ZooKeeper {
            url: ZooKeeperUrl::parse(url)?,
            session_timeout,
            timeout,
            client: tokio::sync::Mutex::new(None),
            bases: Mutex::new(Bases::default()),
            base_reads: std::sync::atomic::AtomicU64::new(0),
            base_loading: tokio::sync::Mutex::new(()),
            last_stamp: Mutex::new(None),
            places: places::Places::default(),
            tls: None,
        })
    }

    /// Sets what a `zookeepers://` store trusts and shows: the CA
    /// certificates of `ca` (PEM, `--store-ca`), else the system's; and the
    /// client certificate and key of `client` (PEM, `--store-client-cert`,
    /// `--store-client-key`) for servers that require one
    /// (`ssl.clientAuth=need`). Server names are verified against the
    /// URL's hosts. Refused for a `zookeeper://` URL, where they would be
    /// ignored.
    pub fn use_tls(&mut self, ca: Option<&[u8]>, client: Option<(&[u8], &[u8])>) -> Result<()> {
        if !self.url.tls {
            if ca.is_none() && client.is_none() {
                return Ok(());
            }
            return Err(Error::InvalidArgument(
                "--store-ca, --store-client-cert and --store-client-key are for TLS: use a \
                 zookeepers:// URL (ZooKeeper's secureClientPort), or drop them"
                    .into(),
            ));
        }
        let bad = |what: &str, e: &zk::Error| Error::InvalidArgument(format!("{what}: {e}"));
        let pem = |flag: &str, bytes: &[u8]| {
            std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|_| Error::InvalidArgument(format!("{flag}: not a PEM file (not text)")))
        };
        let roots = match ca {
            Some(ca) => pem("--store-ca", ca)?,
            None => system_roots()?,
        };
        let mut tls = zk::TlsOptions::new()
            .with_pem_ca(&roots)
            .map_err(|e| bad("--store-ca: no CA certificate in it", &e))?;
        if let Some((cert, key)) = client {
            tls = tls
                .with_pem_identity(
                    &pem("--store-client-cert", cert)?,
                    &pem("--store-client-key", key)?,
                )
                .map_err(|e| bad("--store-client-cert/--store-client-key", &e))?;
        }
        self.tls = Some(tls);
        Ok(())
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &ZooKeeperUrl {
        &self.url
    }

    /// The ACL of every node the store creates. With the URL's credentials
    /// (`user:password@`, ZooKeeper's digest scheme): `creator_all`, full
    /// rights for that user alone, which every broker of the deployment
    /// logs in as, and nothing for any other client of the ensemble, not
    /// even reading (a lease node holds its owner token). Without them:
    /// open to anyone (`world:anyone`), as the ensemble itself is.
    pub fn acls(&self) -> zk::Acls<'static> {
        if self.url.digest.is_some() {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// A client of the current session, under the chroot: the one in use,
    /// or, when there is none or it ended (expired, closed, refused its
    /// credentials), a new session. Bounded by the store timeout as a
    /// whole, the wait for the lock included: callers queue on the lock
    /// while one connects, and each tries its own connect once the one
    /// before failed, so with only the connect bounded the N-th caller
    /// waited up to N store timeouts (with ZooKeeper frozen, a describe
    /// failed after 3.0 s for a store timeout of 1 s behind the watch
    /// tasks' connects: `tests/zookeeper_failures.rs`, `zookeeper_frozen_...`).
    pub async fn client(&self) -> Result<zk::Client> {
        tokio::time::timeout(self.timeout, self.current_or_new_client())
            .await
            .map_err(|_| {
                Error::Unavailable(format!(
                    "ZooKeeper ({}) did not open a session within {} ms",
                    self.url.connect_string(),
                    self.timeout.as_millis()
                ))
            })?
    }

    /// [`ZooKeeper::client`], unbounded.
    async fn current_or_new_client(&self) -> Result<zk::Client> {
        let mut current = self.client.lock().await;
        if let Some(client) = current.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
            tracing::warn!(
                state = ?client.state(),
                "ZooKeeper session ended; opening a new one"
            );
        }
        let client = self.connect().await?;
        *current = Some(client.clone());
        Ok(client)
    }

    /// Opens a session, creates the chroot and the store's fixed nodes if
    /// they are missing, and returns a client rooted there.
    async fn connect(&self) -> Result<zk::Client> {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.session_timeout)
            .with_fail_eagerly();
        if let Some((user, password)) = &self.url.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let servers = self.url.connect_string();
        let client = match &self.tls {
            Some(tls) => {
                connector
                    .with_tls(tls.clone())
                    .secure_connect(&servers)
                    .await
            }
            None => connector.connect(&servers).await,
        }
        .map_err(|e| match (&self.tls, e) {
            (Some(_), zk::Error::NoHosts) => Error::Unavailable(format!(
                "ZooKeeper ({servers}): no server took a TLS session: check that each address \
                 is a secureClientPort, that its certificate names the host as the URL writes \
                 it and comes from a CA of --store-ca (or the system's), and that \
                 --store-client-cert is given if the servers require a client certificate"
            )),
            (_, e) => unavailable("connect", &e),
        })?;
        // A new session: the data may have been wiped since the last.
        self.bases().by_epoch.clear();
        let persistent = zk::CreateMode::Persistent.with_acls(self.acls());
        client
            .mkdir(&self.url.chroot, &persistent)
            .await
            .map_err(|e| failed("create the chroot", &e))?;
        let client = client.chroot(self.url.chroot.clone()).map_err(|_| {
            Error::InvalidArgument(format!(
                "--store: ZooKeeper refused the chroot '{}'",
                self.url.chroot
            ))
        })?;
        for node in [CLOCK, FENCES, layout::NAMES] {
            match client.create(node, b"", &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(failed("create the store's nodes", &e)),
            }
        }
        // End records and lock-delays are TTL nodes (ZooKeeper collects
        // them): a server without them would fail every release. Refused
        // here, at once and naming the setting, rather than there.
        match client
            .create(
                TTL_PROBE,
                b"",
                &persistent.clone().with_ttl(Duration::from_secs(1)),
            )
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(zk::Error::Unimplemented) => {
                return Err(Error::Unavailable(format!(
                    "ZooKeeper ({}) refuses TTL nodes, which the store keeps its end records \
                     and lock-delays in: start every server with \
                     -Dzookeeper.extendedTypesEnabled=true (ZooKeeper 3.6 or later)",
                    self.url.connect_string()
                )))
            }
            Err(e) => return Err(failed("create a TTL node", &e)),
        }
        tracing::info!(
            servers = %self.url.connect_string(),
            chroot = %self.url.chroot,
            session_timeout_ms = client.session_timeout().as_millis(),
            "ZooKeeper session open"
        );
        Ok(client)
    }

    /// Runs `call` on the current session within the store timeout; a
    /// session that ended is replaced for the next call.
    async fn call<T, F, Fut>(&self, what: &'static str, call: F) -> Result<T>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
    {
        let client = self.client().await?;
        match tokio::time::timeout(self.timeout, call(client)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(classify(what, &e)),
            Err(_) => Err(Error::Unavailable(format!(
                "ZooKeeper did not answer {what} within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// Reads the store's clock by writing to it: the leader's time and the
    /// zxid of the write. Fails when no quorum takes writes.
    pub async fn tick(&self) -> Result<Stamp> {
        let stat = self
            .call("the clock's tick", |client| async move {
                client.set_data(CLOCK, b"", None).await
            })
            .await?;
        self.stamped(&stat);
        Ok(stamp(&stat))
    }

    /// Takes in the leader's stamp on a write's answer.
    fn stamped(&self, stat: &zk::Stat) {
        let time = records::LeaderTime {
            unix_ms: u64::try_from(stat.mtime).unwrap_or(0),
            epoch: epoch_of(stat.mzxid),
        };
        *self
            .last_stamp
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((time, std::time::Instant::now()));
    }

    /// The leader's time now, estimated from the last stamp received (plus
    /// the time since), or read by a tick when there is none yet.
    async fn estimated_now(&self) -> Result<records::LeaderTime> {
        let last = *self
            .last_stamp
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((time, at)) = last {
            let elapsed = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
            return Ok(records::LeaderTime {
                unix_ms: time.unix_ms.saturating_add(elapsed),
                epoch: time.epoch,
            });
        }
        let stamp = self.tick().await?;
        Ok(records::LeaderTime {
            unix_ms: stamp.unix_ms,
            epoch: stamp.epoch(),
        })
    }

    fn bases(&self) -> std::sync::MutexGuard<'_, Bases> {
        self.bases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fence of a write with `zxid`: its epoch's base plus its
    /// counter. The base is read (once per epoch and broker), or written by
    /// the first broker to meet the epoch, above `floor` (the broker's
    /// highest fence seen).
    ///
    /// After a wipe the session is new, and the bases are read again
    /// (gone with the data, written anew above `floor`): see [`Bases`].
    pub async fn fence(&self, zxid: i64, floor: u64) -> Result<u64> {
        let counter = zxid.cast_unsigned() & (EPOCH_SPAN - 1);
        Ok(self.base(epoch_of(zxid), floor).await? + counter)
    }

    /// How many times this store read a fence base from ZooKeeper: once
    /// per epoch and session, however many fences it computed.
    pub fn base_reads(&self) -> u64 {
        self.base_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The base of `epoch`'s fences.
    async fn base(&self, epoch: u32, floor: u64) -> Result<u64> {
        if let Some(base) = self.known_base(epoch) {
            return Ok(base);
        }
        // One caller reads it; the others, come meanwhile, find it known.
        let _loading = self.base_loading.lock().await;
        if let Some(base) = self.known_base(epoch) {
            return Ok(base);
        }
        self.base_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!("{FENCES}/{epoch:08x}");
        let read = self
            .call("the fence base's read", |client| {
                let path = path.clone();
                async move {
                    match client.get_data(&path).await {
                        Ok((data, _)) => Ok(Some(data)),
                        Err(zk::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        let base = match read {
            Some(data) => parse_base(&data, &path)?,
            None => self.make_base(epoch, &path, floor).await?,
        };
        self.bases().by_epoch.insert(epoch, base);
        Ok(base)
    }

    fn known_base(&self, epoch: u32) -> Option<u64> {
        self.bases().by_epoch.get(&epoch).copied()
    }

    /// Writes `epoch`'s base if no broker did: above the bases of the
    /// epochs before it by [`EPOCH_SPAN`], above `floor`, and at least the
    /// broker's clock in µs (which, after a wipe that took every base, puts
    /// it above the fences issued before, as the etcd store's epoch does).
    /// A broker that lost the race reads the winner's.
    async fn make_base(&self, epoch: u32, path: &str, floor: u64) -> Result<u64> {
        let earlier = self
            .call("the fence bases' list", |client| async move {
                client.list_children(FENCES).await
            })
            .await?;
        let mut before = 0u64;
        for name in earlier {
            let Ok(e) = u32::from_str_radix(&name, 16) else {
                continue;
            };
            if e >= epoch {
                continue;
            }
            let node = format!("{FENCES}/{name}");
            let data = self
                .call("an earlier fence base's read", |client| {
                    let node = node.clone();
                    async move { client.get_data(&node).await }
                })
                .await?
                .0;
            before = before.max(parse_base(&data, &node)?.saturating_add(EPOCH_SPAN));
        }
        let base = before.max(floor.saturating_add(1)).max(unix_micros());
        let persistent = zk::CreateMode::Persistent.with_acls(self.acls());
        let created = self
            .call("the fence base's write", |client| {
                let (path, data) = (path.to_owned(), base.to_string());
                let persistent = persistent.clone();
                async move {
                    match client.create(&path, data.as_bytes(), &persistent).await {
                        Ok(_) => Ok(true),
                        Err(zk::Error::NodeExists) => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        if created {
            tracing::info!(
                epoch,
                base,
                "ZooKeeper store: a new epoch's fence base written"
            );
            return Ok(base);
        }
        let data = self
            .call("the fence base's read", |client| {
                let path = path.to_owned();
                async move { client.get_data(&path).await }
            })
            .await?
            .0;
        parse_base(&data, path)
    }
}

/// The stamp of a write whose answer is `stat`.
fn stamp(stat: &zk::Stat) -> Stamp {
    Stamp {
        unix_ms: u64::try_from(stat.mtime).unwrap_or(0),
        zxid: stat.mzxid,
    }
}

/// A fence base as a node holds it (decimal).
fn parse_base(data: &[u8], path: &str) -> Result<u64> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Internal(format!("ZooKeeper node {path} holds no fence base")))
}

/// The system's CA certificates (`rustls-native-certs`, as the Redis and
/// PostgreSQL stores take them), as the PEM the ZooKeeper client reads.
fn system_roots() -> Result<String> {
    use base64::Engine as _;
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "--store: zookeepers:// found no CA certificates in the system's store{}: give \
             --store-ca",
            found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        )));
    }
    let mut pem = String::new();
    for cert in &found.certs {
        let encoded = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Ok(pem)
}

/// The broker's wall clock in µs (for a new epoch's base only, never for
/// an expiry).
fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A ZooKeeper error as the store reports it: UNAVAILABLE when the
/// request may or may not have been applied, or the ensemble cannot be
/// reached; internal otherwise.
///
/// `Custom` is UNAVAILABLE too: it is never an answer of ZooKeeper's (those
/// are error codes), but how zookeeper-client fails the requests in flight
/// on a connection it gave up on: an I/O error (a reset, a broken pipe) or
/// "no response from connection in N ms" (a server frozen or cut off).
/// `tests/zookeeper_failures.rs` (`zookeeper_frozen_...`) saw an acquire
/// answered INTERNAL that way while the server was frozen.
fn classify(what: &str, e: &zk::Error) -> Error {
    match e {
        zk::Error::ConnectionLoss
        | zk::Error::Timeout
        | zk::Error::SessionExpired
        | zk::Error::SessionMoved
        | zk::Error::ClientClosed
        | zk::Error::NoHosts
        | zk::Error::Throttled
        | zk::Error::NotReadOnly
        | zk::Error::Custom(_) => unavailable(what, e),
        _ => failed(what, e),
    }
}

fn unavailable(what: &str, e: &zk::Error) -> Error {
    Error::Unavailable(format!("ZooKeeper: {what}: {e}"))
}

fn failed(what: &str, e: &zk::Error) -> Error {
    match e {
        zk::Error::NoAuth | zk::Error::AuthFailed => Error::Unavailable(format!(
            "ZooKeeper refused the store's credentials ({what}: {e}): check the URL's \
             user:password and the chroot's ACL"
        )),
        _ => Error::Internal(format!("ZooKeeper: {what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zxid_is_an_epoch_and_a_counter() {
        let zxid = (7_i64 << 32) | 0x1234;
        assert_eq!(epoch_of(zxid), 7);
        assert_eq!(epoch_of(0), 0);
        assert_eq!(
            Stamp {
                unix_ms: 1,
                zxid: i64::MAX
            }
            .epoch(),
            u32::MAX >> 1
        );
    }
}
