//! The lease operations on ZooKeeper (docs/design/zookeeper.md, sections
//! 3.3 to 3.8): grants of locks and semaphore permits, renewals, looks,
//! releases, revokes, Describe, and the wait line.
//!
//! Every operation reads the name (after a `sync`, so that the member the
//! session is on answers with every write committed before), decides in
//! Rust, and writes in one multi that holds only if nothing of the name
//! changed since the read: its first operation sets the name node's data
//! at the version read. A multi that finds a change reads again (at most
//! [`TRIES`] times). An expiry is decided only on a stamp the leader put
//! on a write made after the read (a tick of the name node), of the same
//! epoch as the lease's own ([`super::records::judge`]).
//!
//! A lock is the name's `lock` node; a permit is `p-<token>`. A renewal
//! touches only its own lease's node (conditioned on that node's version),
//! so the heartbeats of a semaphore's holders never conflict; grants,
//! releases and reported expiries change the name's version, so "fewer
//! than `limit` live permits" is decided on one read and holds at the
//! write.

use zookeeper_client as zk;

use super::{
    layout::{bucket, bucket_path, NamePaths, PERMIT_PREFIX},
    records::{judge, Delay, End, Holding, Judged, LeaderTime},
    ZooKeeper,
};
use crate::{
    duration::millis,
    error::{Error, Result},
    store::{
        contract::{LINGER, QUEUE_LIFETIME},
        Acquired, Blocked, BlockedBy, Checked, Described, GrantSpec, LeaseInfo, RenewItem, Renewed,
        Revocation,
    },
};

/// How many times an operation reads and writes before it gives up on a
/// name that keeps changing under it (as the etcd store).
const TRIES: usize = 16;

/// How many nodes one multi-read asks for at most: an answer is capped by
/// `jute.maxbuffer` (1 MB); a permit's record is about a hundred bytes.
const READ_BATCH: usize = 500;

/// How much time a lock must have left by the leader's time as estimated
/// here (the last stamp received plus the time since: exact but for its
/// millisecond and the clocks' drift over seconds) for an attempt to be
/// refused without a tick.
const CLEARLY_LIVE_MS: u64 = 100;

/// The holder label a lock attempt blocked by semaphore permits hears.
const PERMITS_HOLDER: &str = "(semaphore permits)";

/// A lease's node as read: its record and its stat.
pub(super) type Node = (Holding, zk::Stat);

/// What one read of a name found.
pub(super) struct Read {
    /// The name node's data version: the multi's condition.
    pub(super) version: i32,
    /// The lock lease, if any.
    pub(super) lock: Option<Node>,
    /// The permit of the token asked about, if any.
    pub(super) permit: Option<Node>,
    /// The end record of the token asked about, if any, still within its
    /// linger.
    pub(super) end: Option<End>,
    /// The name's lock-delay (or a revoke's record), if any, and its
    /// node's stat.
    pub(super) delay: Option<(Delay, zk::Stat)>,
    /// The tokens of the name's permits (their records are read apart,
    /// when a grant or Describe needs them).
    pub(super) permits: Vec<String>,
    /// The name's wait line: each place's token and node, in order.
    pub(super) line: Vec<(String, String)>,
}

/// The leader's time and epoch of a write's stat (`mtime`, `mzxid`).
pub(super) fn written_at(stat: &zk::Stat) -> LeaderTime {
    LeaderTime {
        unix_ms: u64::try_from(stat.mtime).unwrap_or(0),
        epoch: super::epoch_of(stat.mzxid),
    }
}

/// Whether a multi failed because the name changed (or went) since it was
/// read: a retry, not an error.
fn changed(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists
    )
}

fn persistent(acls: zk::Acls<'static>) -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(acls)
}

/// An end record's node options: kept for `LINGER` after it is written,
/// then collected by ZooKeeper (a TTL node) whatever happens to the name.
fn lingering(acls: zk::Acls<'static>) -> zk::CreateOptions<'static> {
    persistent(acls).with_ttl(LINGER + std::time::Duration::from_secs(1))
}

/// A lock-delay node's options: collected (a TTL node) once it and a
/// linger after it are over, if no grant deleted it first.
fn delaying(acls: zk::Acls<'static>, delay_ms: u64) -> zk::CreateOptions<'static> {
    persistent(acls).with_ttl(
        std::time::Duration::from_millis(delay_ms) + LINGER + std::time::Duration::from_secs(1),
    )
}

/// When a delay node's delay started: its start, or its creation.
fn delay_started(delay: Delay, stat: &zk::Stat) -> LeaderTime {
    delay.started(LeaderTime {
        unix_ms: u64::try_from(stat.ctime).unwrap_or(0),
        epoch: super::epoch_of(stat.mzxid),
    })
}

/// Adds to `writer` the lock-delay `delay` as the name's `delay` node,
/// in place of the one read (`read`, an ended delay or an earlier
/// revoke's record). A delay of 0 is written all the same when `always`
/// (a revoke's record, which a repeated revoke finds).
fn add_delay(
    writer: &mut zk::MultiWriter<'_>,
    paths: &NamePaths,
    read: Option<&(Delay, zk::Stat)>,
    delay: Delay,
    always: bool,
) -> std::result::Result<(), zk::Error> {
    if delay.delay_ms == 0 && !always {
        return Ok(());
    }
    if let Some((_, stat)) = read {
        writer.add_delete(&paths.delay(), Some(stat.version))?;
    }
    writer.add_create(
        &paths.delay(),
        &delay.encode(),
        &delaying(paths.acls, delay.delay_ms),
    )
}

/// A token's own lease as a request about it found it.
struct Own {
    read: Read,
    /// Its node's path (`lock` or `p-<token>`).
    path: String,
    held: Holding,
    stat: zk::Stat,
    fence: u64,
}

/// Adds to `writer` the end of the lease `own` (its node now at
/// `node_version`), after the name's condition at `name_version`: the
/// lease node deleted, its end record written, and for a lock's expiry
/// its lock-delay, which runs from the lease's end, not from now (a
/// permit has none). One place for every end a holder's own request makes
/// (a release, a look or a renewal that found it expired).
fn add_end(
    writer: &mut zk::MultiWriter<'_>,
    paths: &NamePaths,
    own: &Own,
    name_version: i32,
    node_version: i32,
    token: &str,
    end: End,
) -> std::result::Result<(), zk::Error> {
    writer.add_set_data(&paths.node, b"", Some(name_version))?;
    writer.add_delete(&own.path, Some(node_version))?;
    writer.add_create(&paths.end(token), &end.encode(), &lingering(paths.acls))?;
    if let End::Expired(fence) = end {
        let delay = Delay {
            fence,
            delay_ms: own.held.lock_delay_ms,
            start_unix_ms: written_at(&own.stat)
                .unix_ms
                .saturating_add(own.held.ttl_ms),
        };
        add_delay(writer, paths, own.read.delay.as_ref(), delay, false)?;
    }
    Ok(())
}

/// An attempt refused, for `by`.
fn blocked(by: BlockedBy, fence: u64, remaining_ms: u64, holder: &str) -> Blocked {
    Blocked {
        by,
        fence,
        remaining_ms,
        holder: holder.to_owned(),
        position: 0,
        queued: 0,
        expired: 0,
    }
}

/// The expired leases a grant takes over: each node's path, version and
/// holder's token, and the fence its end record reports.
struct Takeover {
    path: String,
    version: i32,
    token: String,
    fence: u64,
}

fn too_busy(name: &str) -> Error {
    Error::Unavailable(format!(
        "the name '{name}' kept changing under {TRIES} attempts; try again"
    ))
}

impl ZooKeeper {
    /// Creates the name's bucket and node if they are missing (the node a
    /// container: ZooKeeper deletes it once its last record went).
    ///
    /// Buckets are containers too, so that a listing finds only the
    /// buckets that hold names (one `getChildren` of the root): the reaper
    /// may delete a bucket whose last name went just before the name's
    /// node is created in it, which is created again then.
    ///
    /// `true` when this call created the name's node (then empty, at
    /// version 0: no read needed), `false` when another had.
    async fn ensure_name(
        &self,
        client: &zk::Client,
        name: &str,
        paths: &NamePaths,
    ) -> Result<bool> {
        let container = zk::CreateMode::Container.with_acls(paths.acls);
        let create = |path: &str| {
            let path = path.to_owned();
            let container = container.clone();
            async move {
                self.bounded("a name's node", client.create(&path, b"", &container))
                    .await
            }
        };
        for _ in 0..TRIES {
            // The name's node first: its bucket exists but for the first
            // name of a bucket (or one reaped meanwhile).
            match create(&paths.node).await {
                Ok(_) => return Ok(true),
                Err(zk::Error::NodeExists) => return Ok(false),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(super::classify("a name's node", &e)),
            }
            match create(&bucket_path(bucket(name))).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(super::classify("a name's bucket", &e)),
            }
        }
        Err(too_busy(name))
    }

    /// Reads the name (after a sync), with the records of `token` (none
    /// when empty): `None` when its node is gone.
    pub(super) async fn read(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        token: &str,
    ) -> Result<Option<Read>> {
        // The sync and the read are sent together, in one round trip:
        // ZooKeeper answers a session's requests in order, so the read is
        // served after the sync (requests go out when they are made, not
        // when awaited).
        let read = async {
            let synced = client.sync(&paths.node);
            let mut reader = client.new_multi_reader();
            reader.add_get_data(&paths.node)?;
            reader.add_get_data(&paths.lock())?;
            reader.add_get_data(&paths.end(token))?;
            reader.add_get_data(&paths.delay())?;
            reader.add_get_data(&paths.permit(token))?;
            reader.add_get_children(&paths.node)?;
            let (synced, read) = futures_util::future::join(synced, reader.commit()).await;
            synced?;
            read
        };
        let results = self
            .bounded("a name's read", read)
            .await
            .map_err(|e| super::classify("a name's read", &e))?;
        let mut results = results.into_iter();
        let mut next = || results.next();
        let version = match next() {
            Some(zk::MultiReadResult::Data { stat, .. }) => stat.version,
            _ => return Ok(None),
        };
        let lock = match next() {
            Some(zk::MultiReadResult::Data { data, stat }) => {
                Some((Holding::decode(&data, &paths.lock())?, stat))
            }
            _ => None,
        };
        let end = match next() {
            Some(zk::MultiReadResult::Data { data, stat }) if !token.is_empty() => {
                Some((End::decode(&data, &paths.end(token))?, stat))
            }
            _ => None,
        };
        let delay = match next() {
            Some(zk::MultiReadResult::Data { data, stat }) => {
                Some((Delay::decode(&data, &paths.delay())?, stat))
            }
            _ => None,
        };
        let permit = match next() {
            Some(zk::MultiReadResult::Data { data, stat }) if !token.is_empty() => {
                Some((Holding::decode(&data, &paths.permit(token))?, stat))
            }
            _ => None,
        };
        let children = match next() {
            Some(zk::MultiReadResult::Children { children }) => children,
            _ => Vec::new(),
        };
        // An end record is heard for LINGER after it was written; a late
        // reaper changes nothing (judged by the last leader stamp here,
        // which forgets late at worst, never early).
        let end = match end {
            Some((end, stat)) => {
                let written = LeaderTime {
                    unix_ms: u64::try_from(stat.ctime).unwrap_or(0),
                    epoch: super::epoch_of(stat.czxid),
                };
                match judge(written, millis(LINGER), self.estimated_now().await?) {
                    Judged::Ended(_) => None,
                    Judged::Live(_) | Judged::OtherEpoch => Some(end),
                }
            }
            None => None,
        };
        Ok(Some(Read {
            version,
            lock,
            permit,
            end,
            delay,
            permits: children
                .iter()
                .filter_map(|child| child.strip_prefix(PERMIT_PREFIX).map(str::to_owned))
                .collect(),
            line: super::layout::line(&children),
        }))
    }

    /// The records of the name's permits `tokens` (after the read that
    /// listed them); `None` when one went meanwhile (the name changed).
    pub(super) async fn read_permits(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        tokens: &[String],
    ) -> Result<Option<Vec<Node>>> {
        let mut permits = Vec::with_capacity(tokens.len());
        for batch in tokens.chunks(READ_BATCH) {
            let read = async {
                let mut reader = client.new_multi_reader();
                for token in batch {
                    reader.add_get_data(&paths.permit(token))?;
                }
                reader.commit().await
            };
            let results = self
                .bounded("a semaphore's permits' read", read)
                .await
                .map_err(|e| super::classify("a semaphore's permits' read", &e))?;
            for (token, result) in batch.iter().zip(results) {
                match result {
                    zk::MultiReadResult::Data { data, stat } => {
                        permits.push((Holding::decode(&data, &paths.permit(token))?, stat));
                    }
                    _ => return Ok(None),
                }
            }
        }
        Ok(Some(permits))
    }

    /// Stamps the name (writes its node at `version`): the leader's time
    /// now, and the new version; `None` if the name changed meanwhile.
    pub(super) async fn tick_name(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        version: i32,
    ) -> Result<Option<(LeaderTime, i32)>> {
        match self
            .bounded(
                "a name's tick",
                client.set_data(&paths.node, b"", Some(version)),
            )
            .await
        {
            Ok(stat) => {
                self.stamped(&stat);
                Ok(Some((written_at(&stat), stat.version)))
            }
            Err(e) if changed(&e) => Ok(None),
            Err(e) => Err(super::classify("a name's tick", &e)),
        }
    }

    /// `call` within the store timeout (a timeout is UNAVAILABLE, as a lost
    /// connection: the write may have been applied).
    pub(super) async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
    ) -> std::result::Result<T, zk::Error> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => {
                tracing::debug!(what, "ZooKeeper did not answer in time");
                Err(zk::Error::Timeout)
            }
        }
    }

    /// Runs a multi whose first operation is the name node's condition:
    /// `Ok(Some(zxid))` of the write, `Ok(None)` when the name changed.
    pub(super) async fn commit(
        &self,
        what: &str,
        writer: &mut zk::MultiWriter<'_>,
    ) -> Result<Option<i64>> {
        let Ok(answer) = tokio::time::timeout(self.timeout, writer.commit()).await else {
            return Err(Error::Unavailable(format!(
                "ZooKeeper did not answer {what} within {} ms (it may yet apply it)",
                self.timeout.as_millis()
            )));
        };
        match answer {
            Ok(results) => match results.first() {
                Some(zk::MultiWriteResult::SetData { stat }) => {
                    self.stamped(stat);
                    Ok(Some(stat.mzxid))
                }
                _ => Err(Error::Internal(format!(
                    "ZooKeeper answered {what} without the name's write"
                ))),
            },
            Err(zk::MultiWriteError::OperationFailed { source, .. }) if changed(&source) => {
                Ok(None)
            }
            Err(
                zk::MultiWriteError::OperationFailed { source, .. }
                | zk::MultiWriteError::RequestFailed { source },
            ) => Err(super::classify(what, &source)),
        }
    }

    /// Grants a lease of `spec.name` if the name has room for it: a lock
    /// (`spec.limit` 1) when no lease is live on it, a permit when fewer
    /// than `spec.limit` permits are (and no lock); expired leases found are
    /// taken over and reported. The fence is above `floor`. A lease held by
    /// `spec.token` already is granted again, with its fence (a retried
    /// grant whose answer was lost).
    pub async fn acquire(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let client = self.client().await?;
        let paths = NamePaths::new(&spec.name, self.acls());
        let lock = spec.limit <= 1;
        let holding = Holding {
            token: spec.token.clone(),
            ttl_ms: spec.ttl_ms,
            lock_delay_ms: if lock { spec.lock_delay_ms } else { 0 },
            limit: spec.limit.max(1),
            holder: spec.holder.clone(),
        };
        'attempt: for _ in 0..TRIES {
            // A name's node is made when a read finds none (its first
            // grant, or after ZooKeeper reaped it); one this attempt made
            // is empty, with nothing to read.
            let read = match self.read(&client, &paths, &spec.token).await? {
                Some(read) => read,
                None => {
                    if !self.ensure_name(&client, &spec.name, &paths).await? {
                        continue;
                    }
                    Read {
                        version: 0,
                        lock: None,
                        permit: None,
                        end: None,
                        delay: None,
                        permits: Vec::new(),
                        line: Vec::new(),
                    }
                }
            };
            // A retried grant: the caller's own lease, as it is.
            let own = if lock { &read.lock } else { &read.permit };
            if let Some((held, stat)) = own {
                if held.token == spec.token {
                    let fence = self.fence(stat.czxid, floor).await?;
                    return Ok(Acquired::Granted { fence, expired: 0 });
                }
            }
            // A lock clearly alive by the leader's time as estimated here
            // (its last stamp received plus the time since) is refused
            // without the tick that would decide it: a refusal on an
            // estimate is always safe, and the tick would change the
            // name's version under its holder's renewal.
            if let Some((held, stat)) = &read.lock {
                if let Judged::Live(remaining_ms) =
                    judge(written_at(stat), held.ttl_ms, self.estimated_now().await?)
                {
                    if remaining_ms > CLEARLY_LIVE_MS {
                        let fence = self.fence(stat.czxid, floor).await?;
                        let refused = blocked(BlockedBy::Holder, fence, remaining_ms, &held.holder);
                        return self
                            .in_line(&client, &paths, &read.line, spec, refused)
                            .await;
                    }
                }
            }
            let Some(permits) = self.read_permits(&client, &paths, &read.permits).await? else {
                continue;
            };
            let mut version = read.version;
            // The leader's time now, read by a tick of the name once per
            // attempt, when something must be judged by it.
            let now = if read.lock.is_some() || read.delay.is_some() || !permits.is_empty() {
                let Some((ticked, after)) = self.tick_name(&client, &paths, version).await? else {
                    continue;
                };
                version = after;
                Some(ticked)
            } else {
                None
            };
            let mut takeovers = Vec::new();
            if let (Some((held, stat)), Some(now)) = (&read.lock, now) {
                let fence = self.fence(stat.czxid, floor).await?;
                let refused = match judge(written_at(stat), held.ttl_ms, now) {
                    Judged::Live(remaining_ms) => Some(blocked(
                        BlockedBy::Holder,
                        fence,
                        remaining_ms,
                        &held.holder,
                    )),
                    Judged::OtherEpoch => {
                        // Stamped by this leader from now on: judged at
                        // the next attempt, after a full TTL at most.
                        self.restamp(
                            &client,
                            &paths,
                            version,
                            &paths.lock(),
                            &held.encode(),
                            stat.version,
                        )
                        .await;
                        Some(blocked(BlockedBy::Holder, fence, held.ttl_ms, &held.holder))
                    }
                    Judged::Ended(ago) if ago < held.lock_delay_ms => Some(blocked(
                        BlockedBy::LockDelay,
                        fence,
                        held.lock_delay_ms - ago,
                        "",
                    )),
                    Judged::Ended(_) => {
                        takeovers.push(Takeover {
                            path: paths.lock(),
                            version: stat.version,
                            token: held.token.clone(),
                            fence,
                        });
                        None
                    }
                };
                if let Some(refused) = refused {
                    return self
                        .in_line(&client, &paths, &read.line, spec, refused)
                        .await;
                }
            }
            // A lock-delay (after a revoke, or after an expiry reported
            // by its holder's late request) holds the name off until it
            // ends; an ended one goes with the grant.
            let mut ended_delay = None;
            if let (Some((delay, stat)), Some(now)) = (&read.delay, now) {
                match judge(delay_started(*delay, stat), delay.delay_ms, now) {
                    Judged::Ended(_) => ended_delay = Some(stat.version),
                    Judged::Live(remaining_ms) => {
                        let refused = blocked(BlockedBy::LockDelay, delay.fence, remaining_ms, "");
                        return self
                            .in_line(&client, &paths, &read.line, spec, refused)
                            .await;
                    }
                    Judged::OtherEpoch => {
                        // Another leader's clock: restarted from this
                        // leader's now (a delay may be lengthened by a
                        // leader change, never cut short).
                        let restarted = Delay {
                            start_unix_ms: now.unix_ms,
                            ..*delay
                        };
                        self.restamp(
                            &client,
                            &paths,
                            version,
                            &paths.delay(),
                            &restarted.encode(),
                            stat.version,
                        )
                        .await;
                        let refused =
                            blocked(BlockedBy::LockDelay, delay.fence, delay.delay_ms, "");
                        return self
                            .in_line(&client, &paths, &read.line, spec, refused)
                            .await;
                    }
                }
            }
            // The permits: the live ones count against the limit (a lock
            // has none to spare), the ended ones are taken over.
            let mut live: Vec<(u64, u64)> = Vec::new();
            if let Some(now) = now {
                for (held, stat) in &permits {
                    let fence = self.fence(stat.czxid, floor).await?;
                    match judge(written_at(stat), held.ttl_ms, now) {
                        Judged::Live(remaining_ms) => live.push((remaining_ms, fence)),
                        Judged::OtherEpoch => {
                            self.restamp(
                                &client,
                                &paths,
                                version,
                                &paths.permit(&held.token),
                                &held.encode(),
                                stat.version,
                            )
                            .await;
                            live.push((held.ttl_ms, fence));
                        }
                        Judged::Ended(_) => takeovers.push(Takeover {
                            path: paths.permit(&held.token),
                            version: stat.version,
                            token: held.token.clone(),
                            fence,
                        }),
                    }
                }
            }
            let room = if lock { 0 } else { spec.limit as usize };
            if !live.is_empty() && live.len() >= room.max(1) {
                let (remaining_ms, fence) = live.iter().copied().min().unwrap_or((1, 0));
                let refused = if lock {
                    blocked(BlockedBy::Holder, 0, remaining_ms, PERMITS_HOLDER)
                } else {
                    blocked(BlockedBy::Holder, fence, remaining_ms, "")
                };
                return self
                    .in_line(&client, &paths, &read.line, spec, refused)
                    .await;
            }
            // Room: for the first in line, or anyone if nobody waits; a
            // caller behind others waits its turn (one that tries once
            // never jumps the line).
            if let Some((first, _)) = read.line.first() {
                if *first != spec.token {
                    let ahead = blocked(BlockedBy::Queue, 0, millis(QUEUE_LIFETIME), "");
                    return self.in_line(&client, &paths, &read.line, spec, ahead).await;
                }
            }
            let path = if lock {
                paths.lock()
            } else {
                paths.permit(&spec.token)
            };
            let mut grant = client.new_multi_writer();
            let added = (|| {
                grant.add_set_data(&paths.node, b"", Some(version))?;
                for (token, node) in &read.line {
                    if *token == spec.token {
                        grant.add_delete(&paths.child(node), None)?;
                    }
                }
                if let Some(delay_version) = ended_delay {
                    grant.add_delete(&paths.delay(), Some(delay_version))?;
                }
                // Taken over: each holder hears "expired" from its end
                // record, the loss reported here, once.
                for taken in &takeovers {
                    grant.add_delete(&taken.path, Some(taken.version))?;
                    grant.add_create(
                        &paths.end(&taken.token),
                        &End::Expired(taken.fence).encode(),
                        &lingering(paths.acls),
                    )?;
                }
                grant.add_create(&path, &holding.encode(), &persistent(paths.acls))
            })();
            added.map_err(|e| super::failed("a grant", &e))?;
            let Some(zxid) = self.commit("a grant", &mut grant).await? else {
                continue 'attempt;
            };
            self.places.left(&spec.name, &spec.token);
            let fence = self.fence(zxid, floor).await?;
            let expired = u32::try_from(takeovers.len()).unwrap_or(u32::MAX);
            return Ok(Acquired::Granted { fence, expired });
        }
        Err(too_busy(&spec.name))
    }

    /// Writes a record's node again (`data`: the lease unchanged, or a
    /// lock-delay restarted), so that this leader stamps it (a record
    /// stamped by another leader is judged once restamped). Best effort: a
    /// record that changed meanwhile needs none. Conditioned on the name's
    /// version too (`name_version`, after the attempt's tick): `lock` and
    /// `delay` are created anew at every grant and end, with version 0, so
    /// a version alone could overwrite a newer record (see
    /// [`ZooKeeper::rewrite`]).
    async fn restamp(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        name_version: i32,
        path: &str,
        data: &[u8],
        version: i32,
    ) {
        let mut writer = client.new_multi_writer();
        if writer
            .add_check_version(&paths.node, name_version)
            .and_then(|()| writer.add_set_data(path, data, Some(version)))
            .is_ok()
        {
            let _ = tokio::time::timeout(self.timeout, writer.commit()).await;
        }
    }

    /// What became of `token`'s lease, without extending it: Done while it
    /// lives; an ended lease is reported here (its loss, once).
    pub async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        self.end_or_keep(name, token, false).await
    }

    /// Releases `token`'s lease (a release starts no lock-delay); repeated,
    /// it finds its own end record: Released.
    pub async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        Ok(match self.end_or_keep(name, token, true).await? {
            Checked::Done(_) => Checked::Done(()),
            Checked::NotHeld => Checked::NotHeld,
            Checked::NotOwner { fence } => Checked::NotOwner { fence },
            Checked::Revoked { fence } => Checked::Revoked { fence },
            Checked::Expired => Checked::Expired,
            Checked::ExpiredReported => Checked::ExpiredReported,
            Checked::Released => Checked::Released,
        })
    }

    /// Extends `token`'s lease to `ttl_ms` (its own TTL when `None`).
    ///
    /// A lease clearly alive by the leader's time as estimated here (the
    /// common case: a heartbeat a third of a TTL in) is renewed by one
    /// write, conditioned on the lease as read, whose stamp also says
    /// whether it had in fact ended before it. Otherwise the name is
    /// ticked first and the lease judged by that stamp: an ended lease is
    /// reported expired (once), never renewed. A renewal found to have come
    /// after the lease's end is remembered (by the lease's node's `czxid`)
    /// across the retries: the next read sees it renewed, but it ended
    /// before, and is reported expired all the same.
    pub async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        let mut ended_lease = None;
        for _ in 0..TRIES {
            let own = match self.own_lease(&client, &paths, token).await? {
                Some(Ok(own)) => own,
                Some(Err(not_held)) => return Ok(not_held),
                None => continue,
            };
            let mut name_version = own.read.version;
            let mut ended = ended_lease == Some(own.stat.czxid);
            let clearly_live = matches!(
                judge(written_at(&own.stat), own.held.ttl_ms, self.estimated_now().await?),
                Judged::Live(remaining_ms) if remaining_ms > CLEARLY_LIVE_MS
            );
            if !ended && !clearly_live {
                let Some((now, after)) = self.tick_name(&client, &paths, name_version).await?
                else {
                    continue;
                };
                name_version = after;
                ended = matches!(
                    judge(written_at(&own.stat), own.held.ttl_ms, now),
                    Judged::Ended(_)
                );
            }
            if ended {
                let mut writer = client.new_multi_writer();
                add_end(
                    &mut writer,
                    &paths,
                    &own,
                    name_version,
                    own.stat.version,
                    token,
                    End::Expired(own.fence),
                )
                .map_err(|e| super::failed("an expiry's report", &e))?;
                if self
                    .commit("an expiry's report", &mut writer)
                    .await?
                    .is_some()
                {
                    return Ok(Checked::Expired);
                }
                ended_lease = Some(own.stat.czxid);
                continue;
            }
            let renewed = Holding {
                ttl_ms: ttl_ms.unwrap_or(own.held.ttl_ms),
                ..own.held.clone()
            };
            let Some(after) = self
                .rewrite(&client, &paths, &own, name_version, &renewed.encode())
                .await?
            else {
                continue;
            };
            self.stamped(&after);
            match judge(written_at(&own.stat), own.held.ttl_ms, written_at(&after)) {
                Judged::Live(_) | Judged::OtherEpoch => {
                    return Ok(Checked::Done(Renewed {
                        ttl_ms: renewed.ttl_ms,
                        fence: own.fence,
                    }))
                }
                // Renewed too late (the estimate was wrong): reported
                // expired at the next read, whatever that renewal wrote.
                Judged::Ended(_) => ended_lease = Some(own.stat.czxid),
            }
        }
        Err(too_busy(name))
    }

    /// Writes `data` to the lease `own` as read, if it is still that
    /// lease: its node's stat after the write, or `None` when the lease
    /// changed (read again).
    ///
    /// A permit's node is named after its token, so its version alone
    /// says it is the same lease. A lock's node is the name's `lock`,
    /// created anew by every grant with version 0: a version alone would
    /// let a renewal delayed past a release and a new grant (a broker
    /// paused between its read and its write) overwrite the new holder's
    /// lease with its own (ABA). So a lock's write is also conditioned on
    /// the name's version (`name_version`: as read, or after the renewal's
    /// tick), which every grant and end changes.
    async fn rewrite(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        own: &Own,
        name_version: i32,
        data: &[u8],
    ) -> Result<Option<zk::Stat>> {
        if own.path != paths.lock() {
            return match self
                .bounded(
                    "a renewal",
                    client.set_data(&own.path, data, Some(own.stat.version)),
                )
                .await
            {
                Ok(after) => Ok(Some(after)),
                Err(e) if changed(&e) => Ok(None),
                Err(e) => Err(super::classify("a renewal", &e)),
            };
        }
        let mut writer = client.new_multi_writer();
        writer
            .add_check_version(&paths.node, name_version)
            .and_then(|()| writer.add_set_data(&own.path, data, Some(own.stat.version)))
            .map_err(|e| super::failed("a renewal", &e))?;
        let Ok(answer) = tokio::time::timeout(self.timeout, writer.commit()).await else {
            return Err(Error::Unavailable(format!(
                "ZooKeeper did not answer a renewal within {} ms (it may yet apply it)",
                self.timeout.as_millis()
            )));
        };
        match answer {
            Ok(results) => match results.get(1) {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(Some(*stat)),
                _ => Err(Error::Internal(
                    "ZooKeeper answered a renewal without the lease's write".into(),
                )),
            },
            Err(zk::MultiWriteError::OperationFailed { source, .. }) if changed(&source) => {
                Ok(None)
            }
            Err(
                zk::MultiWriteError::OperationFailed { source, .. }
                | zk::MultiWriteError::RequestFailed { source },
            ) => Err(super::classify("a renewal", &source)),
        }
    }

    /// Ends the name's lock lease, whoever holds it: its holder hears it
    /// was revoked (its end record), and its lock-delay starts now (the
    /// `delay` node, written even for a delay of 0 as the revoke's
    /// record): a repeated revoke, before anything was granted again,
    /// finds it: `Already`. A semaphore's permits are not revoked.
    pub async fn revoke(&self, name: &str) -> Result<Revocation> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        for _ in 0..TRIES {
            let Some(read) = self.read(&client, &paths, "").await? else {
                return Ok(Revocation::NotHeld);
            };
            let Some((held, stat)) = read.lock else {
                // The last lease revoked and nothing granted since: the
                // revoke's record is the delay node it wrote.
                return Ok(match read.delay {
                    Some((delay, _)) if delay.start_unix_ms == 0 => {
                        Revocation::Already { fence: delay.fence }
                    }
                    _ => Revocation::NotHeld,
                });
            };
            // A lease that ended is nobody's: nothing to revoke (its
            // holder hears its expiry from the next look or grant).
            let Some((live, version)) = self
                .lock_live(&client, &paths, read.version, &held, &stat)
                .await?
            else {
                continue;
            };
            if !live {
                return Ok(Revocation::NotHeld);
            }
            let fence = self.fence(stat.czxid, 0).await?;
            let mut writer = client.new_multi_writer();
            let added = (|| {
                writer.add_set_data(&paths.node, b"", Some(version))?;
                writer.add_delete(&paths.lock(), Some(stat.version))?;
                writer.add_create(
                    &paths.end(&held.token),
                    &End::Revoked(fence).encode(),
                    &lingering(paths.acls),
                )?;
                // Its lock-delay starts with this write (the node's
                // ctime); written even without one, as the revoke's record.
                let delay = Delay {
                    fence,
                    delay_ms: held.lock_delay_ms,
                    start_unix_ms: 0,
                };
                add_delay(&mut writer, &paths, read.delay.as_ref(), delay, true)
            })();
            added.map_err(|e| super::failed("a revoke", &e))?;
            if self.commit("a revoke", &mut writer).await?.is_some() {
                return Ok(Revocation::Revoked { fence });
            }
        }
        Err(too_busy(name))
    }

    /// Renews every item, all at once on the session (ZooKeeper answers
    /// a session's requests in order: one round trip for the batch, as
    /// pipelined); one outcome per item, in order.
    pub async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        futures_util::future::join_all(
            items
                .iter()
                .map(|item| self.renew(&item.name, &item.token, item.ttl_ms)),
        )
        .await
        .into_iter()
        .collect()
    }

    /// What the store knows of the name (reads after a sync; nothing
    /// written): its lease, if live, or its lock-delay left; its live
    /// permits and its line's length; and the last fence it remembers.
    /// Times left are estimates from the last leader stamp this broker
    /// received (at most a health ping old), never the verdict an
    /// operation waits for.
    pub async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        for _ in 0..TRIES {
            let Some(read) = self.read(&client, &paths, "").await? else {
                return Ok((Described::default(), 0));
            };
            let Some(permits) = self.read_permits(&client, &paths, &read.permits).await? else {
                continue;
            };
            return self.described(&read, &permits).await;
        }
        Err(too_busy(name))
    }

    /// Describe's answer from one read of the name and its permits.
    pub(super) async fn described(
        &self,
        read: &Read,
        permits: &[Node],
    ) -> Result<(Described, u64)> {
        let now = self.estimated_now().await?;
        let mut described = Described {
            waiters: u64::try_from(read.line.len()).unwrap_or(u64::MAX),
            ..Described::default()
        };
        let mut last_fence = 0;
        if let Some((held, stat)) = &read.lock {
            let fence = self.fence(stat.czxid, 0).await?;
            last_fence = fence;
            let info = |remaining_ms: u64| LeaseInfo {
                holder: held.holder.clone(),
                fence,
                remaining_ms: remaining_ms.min(held.ttl_ms),
                ttl_ms: held.ttl_ms,
                granted_at_unix_ms: u64::try_from(stat.ctime).unwrap_or(0),
                lock_delay_ms: held.lock_delay_ms,
            };
            match judge(written_at(stat), held.ttl_ms, now) {
                Judged::Live(remaining_ms) => described.lease = Some(info(remaining_ms)),
                // Another leader's stamp: live until judged (a full TTL).
                Judged::OtherEpoch => described.lease = Some(info(held.ttl_ms)),
                Judged::Ended(ago) => {
                    described.lock_delay_remaining_ms = held.lock_delay_ms.saturating_sub(ago);
                }
            }
        }
        for (held, stat) in permits {
            last_fence = last_fence.max(self.fence(stat.czxid, 0).await?);
            if !matches!(judge(written_at(stat), held.ttl_ms, now), Judged::Ended(_)) {
                described.permits += 1;
            }
        }
        if let Some((delay, stat)) = &read.delay {
            last_fence = last_fence.max(delay.fence);
            if described.lease.is_none() {
                let left = match judge(delay_started(*delay, stat), delay.delay_ms, now) {
                    Judged::Live(left) => left,
                    Judged::OtherEpoch => delay.delay_ms,
                    Judged::Ended(_) => 0,
                };
                described.lock_delay_remaining_ms = described.lock_delay_remaining_ms.max(left);
            }
        }
        Ok((described, last_fence))
    }

    /// A refused attempt, with the caller's place in line when it waits
    /// (`spec.queued`): taken now if it has none. A place is an ephemeral
    /// node of this broker's session, so it lapses when the broker dies
    /// (its session expires), and needs no write to be kept; the broker
    /// deletes it once its waiter stopped refreshing it for the contract's
    /// lifetime of a place (`places.rs`).
    async fn in_line(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        line: &[(String, String)],
        spec: &GrantSpec,
        mut blocked: Blocked,
    ) -> Result<Acquired> {
        blocked.queued = u64::try_from(line.len()).unwrap_or(u64::MAX);
        if spec.queued {
            let rank = line.iter().position(|(token, _)| *token == spec.token);
            let (position, queued) = match rank {
                Some(rank) => {
                    self.places
                        .touched(&spec.name, &spec.token, Some(line[rank].1.clone()));
                    (rank + 1, line.len())
                }
                None => {
                    // Remembered before it is taken: a creation whose
                    // answer is lost may still have made it.
                    self.places.touched(&spec.name, &spec.token, None);
                    let options = zk::CreateMode::EphemeralSequential.with_acls(paths.acls);
                    self.bounded(
                        "a place in line",
                        client.create(&paths.place_of(&spec.token), b"", &options),
                    )
                    .await
                    .map_err(|e| super::classify("a place in line", &e))?;
                    (line.len() + 1, line.len() + 1)
                }
            };
            blocked.position = u64::try_from(position).unwrap_or(u64::MAX);
            blocked.queued = u64::try_from(queued).unwrap_or(u64::MAX);
        }
        Ok(Acquired::Blocked(blocked))
    }

    /// The rank (0: first) of each token's place in the name's line;
    /// `None` for a token without one. A read: the broker's session keeps
    /// the places.
    pub async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        self.places.refreshed(name, tokens);
        let line = self.line_of(name).await?;
        Ok(tokens
            .iter()
            .map(|token| {
                line.iter()
                    .position(|(t, _)| t == token)
                    .map(|rank| u64::try_from(rank).unwrap_or(u64::MAX))
            })
            .collect())
    }

    /// Takes `token` out of the name's line.
    pub async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        for (_, node) in self.line_of(name).await?.iter().filter(|(t, _)| t == token) {
            match self
                .bounded("a place's removal", client.delete(&paths.child(node), None))
                .await
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(super::classify("a place's removal", &e)),
            }
        }
        self.places.left(name, token);
        Ok(())
    }

    /// The name's line, in order (after a sync).
    pub(super) async fn line_of(&self, name: &str) -> Result<Vec<(String, String)>> {
        Ok(super::layout::line(&self.children_of(name).await?))
    }

    /// The name's records' nodes (after a sync); none when it has no node.
    pub(super) async fn children_of(&self, name: &str) -> Result<Vec<String>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        let children = self
            .bounded("a name's listing", async {
                // Sent together: served in order (see `read`).
                let (synced, children) = futures_util::future::join(
                    client.sync(&paths.node),
                    client.list_children(&paths.node),
                )
                .await;
                synced?;
                children
            })
            .await;
        match children {
            Ok(children) => Ok(children),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(super::classify("a name's listing", &e)),
        }
    }

    /// Reads the name for a request of `token` about its own lease (its
    /// lock, or its permit); or, when `token` holds no lease of the name,
    /// what it hears instead; `None` when the name changed while that was
    /// decided (read again).
    async fn own_lease<T>(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        token: &str,
    ) -> Result<Option<std::result::Result<Own, Checked<T>>>> {
        let Some(mut read) = self.read(client, paths, token).await? else {
            return Ok(Some(Err(Checked::NotHeld)));
        };
        let (path, (held, stat)) = match (read.lock.take(), read.permit.take()) {
            (Some(lock), _) if lock.0.token == token => (paths.lock(), lock),
            (_, Some(permit)) => (paths.permit(token), permit),
            (other, None) => {
                return Ok(self
                    .not_held(client, paths, read.version, read.end, other)
                    .await?
                    .map(Err))
            }
        };
        let fence = self.fence(stat.czxid, 0).await?;
        Ok(Some(Ok(Own {
            read,
            path,
            held,
            stat,
            fence,
        })))
    }

    /// What a token that holds no lease of the name hears: its own end,
    /// or the current lock holder's fence while that lease lives, or
    /// nothing; `None` when the name changed meanwhile.
    async fn not_held<T>(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        version: i32,
        end: Option<End>,
        lock: Option<Node>,
    ) -> Result<Option<Checked<T>>> {
        Ok(Some(match (end, lock) {
            (Some(End::Released), _) => Checked::Released,
            (Some(End::Revoked(fence)), _) => Checked::Revoked { fence },
            (Some(End::Expired(_)), _) => Checked::ExpiredReported,
            (None, Some((held, theirs))) => {
                match self
                    .lock_live(client, paths, version, &held, &theirs)
                    .await?
                {
                    None => return Ok(None),
                    Some((true, _)) => Checked::NotOwner {
                        fence: self.fence(theirs.czxid, 0).await?,
                    },
                    // Another's lease that ended is nobody's: not held.
                    Some((false, _)) => Checked::NotHeld,
                }
            }
            (None, None) => Checked::NotHeld,
        }))
    }

    /// Whether the lock lease `held` (its node's `stat`) lives: by the
    /// leader's time as estimated here when it clearly does, else by a
    /// tick of the name (at `version`); with the name's version after.
    /// `None` when the name changed before the tick. A lease stamped by
    /// another leader lives until this one restamps it.
    async fn lock_live(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        version: i32,
        held: &Holding,
        stat: &zk::Stat,
    ) -> Result<Option<(bool, i32)>> {
        if let Judged::Live(remaining_ms) =
            judge(written_at(stat), held.ttl_ms, self.estimated_now().await?)
        {
            if remaining_ms > CLEARLY_LIVE_MS {
                return Ok(Some((true, version)));
            }
        }
        let Some((now, after)) = self.tick_name(client, paths, version).await? else {
            return Ok(None);
        };
        let live = !matches!(judge(written_at(stat), held.ttl_ms, now), Judged::Ended(_));
        Ok(Some((live, after)))
    }

    /// A look (`release` false) or a release of `token`'s lease.
    async fn end_or_keep(
        &self,
        name: &str,
        token: &str,
        release: bool,
    ) -> Result<Checked<Renewed>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        for _ in 0..TRIES {
            let own = match self.own_lease(&client, &paths, token).await? {
                Some(Ok(own)) => own,
                Some(Err(not_held)) => return Ok(not_held),
                None => continue,
            };
            let Some((now, version)) = self.tick_name(&client, &paths, own.read.version).await?
            else {
                continue;
            };
            let ended = match judge(written_at(&own.stat), own.held.ttl_ms, now) {
                Judged::Ended(_) => true,
                Judged::Live(_) | Judged::OtherEpoch => false,
            };
            let kept = Renewed {
                ttl_ms: own.held.ttl_ms,
                fence: own.fence,
            };
            if !ended && !release {
                return Ok(Checked::Done(kept));
            }
            let end = if ended {
                End::Expired(own.fence)
            } else {
                End::Released
            };
            let mut writer = client.new_multi_writer();
            add_end(
                &mut writer,
                &paths,
                &own,
                version,
                own.stat.version,
                token,
                end,
            )
            .map_err(|e| super::failed("an end", &e))?;
            if self.commit("an end", &mut writer).await?.is_some() {
                return Ok(if ended {
                    Checked::Expired
                } else {
                    Checked::Done(kept)
                });
            }
        }
        Err(too_busy(name))
    }
}
