//! A lock's grant, look and release on ZooKeeper: the first slice of the
//! lease operations (docs/design/zookeeper.md, sections 3.3 and 3.5), for
//! locks without wait lines, semaphores or lock-delay nodes yet.
//!
//! Every operation reads the name (after a `sync`, so that the member the
//! session is on answers with every write committed before), decides in
//! Rust, and writes in one multi that holds only if nothing of the name
//! changed since the read: its first operation sets the name node's data
//! at the version read. A multi that finds a change reads again (at most
//! [`TRIES`] times). An expiry is decided only on a stamp the leader put
//! on a write made after the read (a tick of the name node), of the same
//! epoch as the lease's own ([`super::records::judge`]).

use zookeeper_client as zk;

use super::{
    layout::{bucket, bucket_path, NamePaths},
    records::{judge, Delay, End, Holding, Judged, LeaderTime},
    ZooKeeper,
};
use crate::{
    duration::millis,
    error::{Error, Result},
    store::{
        contract::{LINGER, QUEUE_LIFETIME},
        Acquired, Blocked, BlockedBy, Checked, Described, GrantSpec, LeaseInfo, RenewItem, Renewed,
    },
};

/// How many times an operation reads and writes before it gives up on a
/// name that keeps changing under it (as the etcd store).
const TRIES: usize = 16;

/// What one read of a name found.
struct Read {
    /// The name node's data version: the multi's condition.
    version: i32,
    /// The lock lease, if any: its record and its node's stat.
    lock: Option<(Holding, zk::Stat)>,
    /// The end record of the token asked about, if any.
    end: Option<End>,
    /// The name's lock-delay (or a revoke's record), if any, and its
    /// node's stat.
    delay: Option<(Delay, zk::Stat)>,
    /// The name's wait line: each place's token and node, in order.
    line: Vec<(String, String)>,
}

/// The leader's time and epoch of a write's stat (`mtime`, `mzxid`).
fn written_at(stat: &zk::Stat) -> LeaderTime {
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

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// An end record's node options: kept for `LINGER` after it is written,
/// then collected by ZooKeeper (a TTL node) whatever happens to the name.
fn lingering() -> zk::CreateOptions<'static> {
    persistent().with_ttl(LINGER + std::time::Duration::from_secs(1))
}

/// A lock-delay node's options: collected (a TTL node) once it and a
/// linger after it are over, if no grant deleted it first.
fn delaying(delay_ms: u64) -> zk::CreateOptions<'static> {
    persistent().with_ttl(
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
    writer.add_create(&paths.delay(), &delay.encode(), &delaying(delay.delay_ms))
}

/// Adds to `writer` the end of `token`'s lease `held` (its node at
/// `lock_version`, granted or last renewed at `stat`'s stamp), after the
/// name's condition at `name_version` (`delay_read`: the name's delay
/// node as read): the lease node deleted, its end
/// record written, and for an expiry the lock-delay, which runs from the
/// lease's end, not from now. One place for every end a holder's own
/// request makes (a release, a look or a renewal that found it expired).
#[allow(clippy::too_many_arguments)]
fn add_end(
    writer: &mut zk::MultiWriter<'_>,
    paths: &NamePaths,
    delay_read: Option<&(Delay, zk::Stat)>,
    name_version: i32,
    lock_version: i32,
    token: &str,
    held: &Holding,
    stat: &zk::Stat,
    end: End,
) -> std::result::Result<(), zk::Error> {
    writer.add_set_data(&paths.node, b"", Some(name_version))?;
    writer.add_delete(&paths.lock(), Some(lock_version))?;
    writer.add_create(&paths.end(token), &end.encode(), &lingering())?;
    if let End::Expired(fence) = end {
        let delay = Delay {
            fence,
            delay_ms: held.lock_delay_ms,
            start_unix_ms: written_at(stat).unix_ms.saturating_add(held.ttl_ms),
        };
        add_delay(writer, paths, delay_read, delay, false)?;
    }
    Ok(())
}

/// An attempt refused by a lock-delay.
fn delayed(fence: u64, remaining_ms: u64) -> Blocked {
    Blocked {
        by: BlockedBy::LockDelay,
        fence,
        remaining_ms,
        holder: String::new(),
        position: 0,
        queued: 0,
        expired: 0,
    }
}

impl ZooKeeper {
    /// Creates the name's bucket and node if they are missing (the node a
    /// container: ZooKeeper deletes it once its last record went).
    async fn ensure_name(&self, client: &zk::Client, name: &str, paths: &NamePaths) -> Result<()> {
        let bucket = bucket_path(bucket(name));
        for (path, options) in [
            (bucket.as_str(), persistent()),
            (
                paths.node.as_str(),
                zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
            ),
        ] {
            match client.create(path, b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(super::classify("a name's node", &e)),
            }
        }
        Ok(())
    }

    /// Reads the name (after a sync): `None` when its node is gone.
    async fn read(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        token: &str,
    ) -> Result<Option<Read>> {
        let read = async {
            client.sync(&paths.node).await?;
            let mut reader = client.new_multi_reader();
            reader.add_get_data(&paths.node)?;
            reader.add_get_data(&paths.lock())?;
            reader.add_get_data(&paths.end(token))?;
            reader.add_get_data(&paths.delay())?;
            reader.add_get_children(&paths.node)?;
            reader.commit().await
        };
        let results = tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| {
                Error::Unavailable("ZooKeeper did not answer a name's read in time".into())
            })?
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
            Some(zk::MultiReadResult::Data { data, .. }) => {
                Some(End::decode(&data, &paths.end(token))?)
            }
            _ => None,
        };
        let delay = match next() {
            Some(zk::MultiReadResult::Data { data, stat }) => {
                Some((Delay::decode(&data, &paths.delay())?, stat))
            }
            _ => None,
        };
        let line = match next() {
            Some(zk::MultiReadResult::Children { children }) => super::layout::line(&children),
            _ => Vec::new(),
        };
        Ok(Some(Read {
            version,
            lock,
            end,
            delay,
            line,
        }))
    }

    /// Stamps the name (writes its node at `version`): the leader's time
    /// now, and the new version; `None` if the name changed meanwhile.
    async fn tick_name(
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
    async fn bounded<T>(
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
    async fn commit(&self, what: &str, writer: &mut zk::MultiWriter<'_>) -> Result<Option<i64>> {
        let Ok(answer) = tokio::time::timeout(self.timeout, writer.commit()).await else {
            return Err(Error::Unavailable(format!(
                "ZooKeeper did not answer {what} within {} ms (it may yet apply it)",
                self.timeout.as_millis()
            )));
        };
        match answer {
            Ok(results) => match results.first() {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(Some(stat.mzxid)),
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

    /// Grants the lock of `spec.name` if it is free (or its lease ended,
    /// which the grant reports), with a fence above `floor`. A lock held
    /// by `spec.token` already is granted again, with its fence (a retried
    /// grant whose answer was lost).
    pub async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        let client = self.client().await?;
        let paths = NamePaths::new(&spec.name);
        let holding = Holding {
            token: spec.token.clone(),
            ttl_ms: spec.ttl_ms,
            lock_delay_ms: spec.lock_delay_ms,
            limit: 1,
            holder: spec.holder.clone(),
        };
        'attempt: for _ in 0..TRIES {
            self.ensure_name(&client, &spec.name, &paths).await?;
            let Some(read) = self.read(&client, &paths, &spec.token).await? else {
                continue;
            };
            let mut version = read.version;
            // The leader's time now, read by a tick of the name once per
            // attempt (and only when something must be judged by it).
            let mut now = None;
            // The takeover of an ended lease: its node's version, its
            // holder's token and its fence (reported as expired).
            let mut takeover = None;
            if let Some((held, stat)) = &read.lock {
                let fence = self.fence(stat.czxid, floor).await?;
                if held.token == spec.token {
                    return Ok(Acquired::Granted { fence, expired: 0 });
                }
                let Some((ticked, after)) = self.tick_name(&client, &paths, version).await? else {
                    continue;
                };
                (now, version) = (Some(ticked), after);
                match judge(written_at(stat), held.ttl_ms, ticked) {
                    Judged::Live(remaining_ms) => {
                        return self
                            .in_line(
                                &client,
                                &paths,
                                &read.line,
                                spec,
                                Blocked {
                                    by: BlockedBy::Holder,
                                    fence,
                                    remaining_ms,
                                    holder: held.holder.clone(),
                                    position: 0,
                                    queued: 0,
                                    expired: 0,
                                },
                            )
                            .await
                    }
                    Judged::OtherEpoch => {
                        // Stamped by this leader from now on: judged at
                        // the next attempt, after a full TTL at most.
                        let _ = self
                            .bounded(
                                "a lease's rewrite",
                                client.set_data(&paths.lock(), &held.encode(), Some(stat.version)),
                            )
                            .await;
                        return self
                            .in_line(
                                &client,
                                &paths,
                                &read.line,
                                spec,
                                Blocked {
                                    by: BlockedBy::Holder,
                                    fence,
                                    remaining_ms: held.ttl_ms,
                                    holder: held.holder.clone(),
                                    position: 0,
                                    queued: 0,
                                    expired: 0,
                                },
                            )
                            .await;
                    }
                    Judged::Ended(ago) if ago < held.lock_delay_ms => {
                        return self
                            .in_line(
                                &client,
                                &paths,
                                &read.line,
                                spec,
                                delayed(fence, held.lock_delay_ms - ago),
                            )
                            .await
                    }
                    Judged::Ended(_) => takeover = Some((held.token.clone(), stat.version, fence)),
                }
            }
            // A lock-delay (after a revoke, or after an expiry reported
            // by its holder's late request) holds the name off until it
            // ends; an ended one goes with the grant.
            let mut ended_delay = None;
            if let Some((delay, stat)) = &read.delay {
                let ticked = match now {
                    Some(ticked) => ticked,
                    None => {
                        let Some((ticked, after)) =
                            self.tick_name(&client, &paths, version).await?
                        else {
                            continue 'attempt;
                        };
                        version = after;
                        ticked
                    }
                };
                match judge(delay_started(*delay, stat), delay.delay_ms, ticked) {
                    Judged::Ended(_) => ended_delay = Some(stat.version),
                    Judged::Live(remaining_ms) => {
                        return self
                            .in_line(
                                &client,
                                &paths,
                                &read.line,
                                spec,
                                delayed(delay.fence, remaining_ms),
                            )
                            .await
                    }
                    Judged::OtherEpoch => {
                        // Another leader's clock: restarted from this
                        // leader's now (a delay may be lengthened by a
                        // leader change, never cut short).
                        let restarted = Delay {
                            start_unix_ms: ticked.unix_ms,
                            ..*delay
                        };
                        let _ = self
                            .bounded(
                                "a lock-delay's rewrite",
                                client.set_data(
                                    &paths.delay(),
                                    &restarted.encode(),
                                    Some(stat.version),
                                ),
                            )
                            .await;
                        return self
                            .in_line(
                                &client,
                                &paths,
                                &read.line,
                                spec,
                                delayed(delay.fence, delay.delay_ms),
                            )
                            .await;
                    }
                }
            }
            // Free: the first in line, or anyone if nobody waits; a caller
            // behind others waits its turn (one that tries once never
            // jumps the line).
            let mine: Vec<&String> = read
                .line
                .iter()
                .filter(|(token, _)| *token == spec.token)
                .map(|(_, node)| node)
                .collect();
            if let Some((first, _)) = read.line.first() {
                if *first != spec.token {
                    let ahead = Blocked {
                        by: BlockedBy::Queue,
                        fence: 0,
                        remaining_ms: millis(QUEUE_LIFETIME),
                        holder: String::new(),
                        position: 0,
                        queued: 0,
                        expired: 0,
                    };
                    return self.in_line(&client, &paths, &read.line, spec, ahead).await;
                }
            }
            let mut grant = client.new_multi_writer();
            let added = (|| {
                grant.add_set_data(&paths.node, b"", Some(version))?;
                for node in &mine {
                    grant.add_delete(&paths.child(node), None)?;
                }
                if let Some(delay_version) = ended_delay {
                    grant.add_delete(&paths.delay(), Some(delay_version))?;
                }
                if let Some((old_token, lock_version, old_fence)) = &takeover {
                    // Taken over: its holder hears "expired" from its end
                    // record, the loss reported here, once.
                    grant.add_delete(&paths.lock(), Some(*lock_version))?;
                    grant.add_create(
                        &paths.end(old_token),
                        &End::Expired(*old_fence).encode(),
                        &lingering(),
                    )?;
                }
                grant.add_create(&paths.lock(), &holding.encode(), &persistent())
            })();
            added.map_err(|e| super::failed("a grant", &e))?;
            let expired = u32::from(takeover.is_some());
            if let Some(zxid) = self.commit("a grant", &mut grant).await? {
                let fence = self.fence(zxid, floor).await?;
                return Ok(Acquired::Granted { fence, expired });
            }
        }
        Err(Error::Unavailable(format!(
            "the name '{}' kept changing under {TRIES} grant attempts; try again",
            spec.name
        )))
    }

    /// What became of `token`'s lock lease, without extending it: Done
    /// while it lives; an ended lease is reported here (its loss, once).
    pub async fn check_lock(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        self.end_or_keep(name, token, false).await
    }

    /// Releases `token`'s lock lease (a release starts no lock-delay);
    /// repeated, it finds its own end record: Released.
    pub async fn release_lock(&self, name: &str, token: &str) -> Result<Checked<()>> {
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

    /// Extends `token`'s lock lease to `ttl_ms` (its own TTL when `None`):
    /// one write, conditioned on the lease node's version, whose stamp
    /// also says whether the lease had ended before it (nobody took it
    /// over yet): then the renewal is undone into the report of its
    /// expiry, and the holder hears it expired, once.
    pub async fn renew_lock(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name);
        for _ in 0..TRIES {
            let (read, held, stat, fence) = match self.own_lease(&client, &paths, token).await? {
                Ok(owned) => owned,
                Err(not_held) => return Ok(not_held),
            };
            let renewed = Holding {
                ttl_ms: ttl_ms.unwrap_or(held.ttl_ms),
                ..held.clone()
            };
            let after = match self
                .bounded(
                    "a renewal",
                    client.set_data(&paths.lock(), &renewed.encode(), Some(stat.version)),
                )
                .await
            {
                Ok(after) => after,
                Err(e) if changed(&e) => continue,
                Err(e) => return Err(super::classify("a renewal", &e)),
            };
            match judge(written_at(&stat), held.ttl_ms, written_at(&after)) {
                Judged::Live(_) | Judged::OtherEpoch => {
                    return Ok(Checked::Done(Renewed {
                        ttl_ms: renewed.ttl_ms,
                        fence,
                    }))
                }
                Judged::Ended(_) => {
                    // Renewed too late: report the expiry instead (the
                    // name's version read is still the condition).
                    let mut writer = client.new_multi_writer();
                    add_end(
                        &mut writer,
                        &paths,
                        read.delay.as_ref(),
                        read.version,
                        after.version,
                        token,
                        &held,
                        &stat,
                        End::Expired(fence),
                    )
                    .map_err(|e| super::failed("an expiry's report", &e))?;
                    if self
                        .commit("an expiry's report", &mut writer)
                        .await?
                        .is_some()
                    {
                        return Ok(Checked::Expired);
                    }
                }
            }
        }
        Err(Error::Unavailable(format!(
            "the name '{name}' kept changing under {TRIES} attempts; try again"
        )))
    }

    /// Ends the name's lock lease, whoever holds it: its holder hears it
    /// was revoked (its end record), and its lock-delay starts now (the
    /// `delay` node, written even for a delay of 0 as the revoke's
    /// record): a repeated revoke, before anything was granted again,
    /// finds it: `Already`.
    pub async fn revoke_lock(&self, name: &str) -> Result<crate::store::Revocation> {
        use crate::store::Revocation;
        let client = self.client().await?;
        let paths = NamePaths::new(name);
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
            let fence = self.fence(stat.czxid, 0).await?;
            let mut writer = client.new_multi_writer();
            let added = (|| {
                writer.add_set_data(&paths.node, b"", Some(read.version))?;
                writer.add_delete(&paths.lock(), Some(stat.version))?;
                writer.add_create(
                    &paths.end(&held.token),
                    &End::Revoked(fence).encode(),
                    &lingering(),
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
        Err(Error::Unavailable(format!(
            "the name '{name}' kept changing under {TRIES} attempts; try again"
        )))
    }

    /// Renews every item, all at once on the session (ZooKeeper answers
    /// a session's requests in order: one round trip for the batch, as
    /// pipelined); one outcome per item, in order.
    pub async fn renew_many_locks(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        futures_util::future::join_all(
            items
                .iter()
                .map(|item| self.renew_lock(&item.name, &item.token, item.ttl_ms)),
        )
        .await
        .into_iter()
        .collect()
    }

    /// What the store knows of the name (a read after a sync; nothing
    /// written): its lease, if live, or its lock-delay left; and the last
    /// fence it remembers. Times left are estimates from the last leader
    /// stamp this broker received (at most a health ping old), never the
    /// verdict an operation waits for.
    pub async fn describe_lock(&self, name: &str) -> Result<(Described, u64)> {
        let client = self.client().await?;
        let paths = NamePaths::new(name);
        let Some(read) = self.read(&client, &paths, "").await? else {
            return Ok((Described::default(), 0));
        };
        let now = self.estimated_now().await?;
        let mut described = Described::default();
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
    /// (its session expires), and needs no write to be kept.
    async fn in_line(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        line: &[(String, String)],
        spec: &GrantSpec,
        mut blocked: Blocked,
    ) -> Result<Acquired> {
        if spec.queued {
            let rank = line.iter().position(|(token, _)| *token == spec.token);
            let (position, queued) = match rank {
                Some(rank) => (rank + 1, line.len()),
                None => {
                    let options =
                        zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
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
        let paths = NamePaths::new(name);
        for (_, node) in self.line_of(name).await?.iter().filter(|(t, _)| t == token) {
            match self
                .bounded("a place's removal", client.delete(&paths.child(node), None))
                .await
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(super::classify("a place's removal", &e)),
            }
        }
        Ok(())
    }

    /// The name's line, in order (after a sync).
    async fn line_of(&self, name: &str) -> Result<Vec<(String, String)>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name);
        let children = self
            .bounded("a line's read", async {
                client.sync(&paths.node).await?;
                client.list_children(&paths.node).await
            })
            .await;
        match children {
            Ok(children) => Ok(super::layout::line(&children)),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(super::classify("a line's read", &e)),
        }
    }

    /// Reads the name for a request of `token` about its own lease: the
    /// read, the lease's record, its node's stat and its fence; or, when
    /// `token` holds no lease of the name, what it hears instead.
    async fn own_lease<T>(
        &self,
        client: &zk::Client,
        paths: &NamePaths,
        token: &str,
    ) -> Result<std::result::Result<(Read, Holding, zk::Stat, u64), Checked<T>>> {
        let Some(mut read) = self.read(client, paths, token).await? else {
            return Ok(Err(Checked::NotHeld));
        };
        let (held, stat) = match read.lock.take() {
            Some((held, stat)) if held.token == token => (held, stat),
            other => return Ok(Err(self.not_held(read.end, other).await?)),
        };
        let fence = self.fence(stat.czxid, 0).await?;
        Ok(Ok((read, held, stat, fence)))
    }

    /// What a token that holds no lease of the name hears: its own end,
    /// or the current holder's fence, or nothing.
    async fn not_held<T>(
        &self,
        end: Option<End>,
        lock: Option<(Holding, zk::Stat)>,
    ) -> Result<Checked<T>> {
        Ok(match (end, lock) {
            (Some(End::Released), _) => Checked::Released,
            (Some(End::Revoked(fence)), _) => Checked::Revoked { fence },
            (Some(End::Expired(_)), _) => Checked::ExpiredReported,
            (None, Some((_, theirs))) => Checked::NotOwner {
                fence: self.fence(theirs.czxid, 0).await?,
            },
            (None, None) => Checked::NotHeld,
        })
    }

    /// A look (`release` false) or a release of `token`'s lock lease.
    async fn end_or_keep(
        &self,
        name: &str,
        token: &str,
        release: bool,
    ) -> Result<Checked<Renewed>> {
        let client = self.client().await?;
        let paths = NamePaths::new(name);
        for _ in 0..TRIES {
            let (read, held, stat, fence) = match self.own_lease(&client, &paths, token).await? {
                Ok(owned) => owned,
                Err(not_held) => return Ok(not_held),
            };
            let Some((now, version)) = self.tick_name(&client, &paths, read.version).await? else {
                continue;
            };
            let ended = match judge(written_at(&stat), held.ttl_ms, now) {
                Judged::Ended(_) => true,
                Judged::Live(_) | Judged::OtherEpoch => false,
            };
            if !ended && !release {
                return Ok(Checked::Done(Renewed {
                    ttl_ms: held.ttl_ms,
                    fence,
                }));
            }
            let end = if ended {
                End::Expired(fence)
            } else {
                End::Released
            };
            let mut writer = client.new_multi_writer();
            add_end(
                &mut writer,
                &paths,
                read.delay.as_ref(),
                version,
                stat.version,
                token,
                &held,
                &stat,
                end,
            )
            .map_err(|e| super::failed("an end", &e))?;
            if self.commit("an end", &mut writer).await?.is_some() {
                return Ok(if ended {
                    Checked::Expired
                } else {
                    Checked::Done(Renewed {
                        ttl_ms: held.ttl_ms,
                        fence,
                    })
                });
            }
        }
        Err(Error::Unavailable(format!(
            "the name '{name}' kept changing under {TRIES} attempts; try again"
        )))
    }
}
