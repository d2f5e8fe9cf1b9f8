//! The sweep of leases nobody will ask about again.
//!
//! Nothing deletes a lease node when its lease ends: the next request
//! about the name does (its holder's late renewal reports the expiry, an
//! acquirer takes the lease over). A lease whose holder died on a name
//! nobody asks for again would keep its node, its name's node and its
//! bucket for ever: something kept per distinct name, which the contract
//! rules out. End records and lock-delays are TTL nodes and go by
//! themselves; places in line go with their broker's session or lapse
//! (`places.rs`); lease nodes cannot be TTL nodes, since a renewal may
//! lengthen a lease past any TTL fixed at its grant.
//!
//! So every broker sweeps: a bucket every [`SWEEP_EVERY`], in turn from a
//! bucket of its own choosing (4,096 buckets: a pass in about 17 minutes),
//! deleting the lease nodes whose lease ended more than its lock-delay and
//! the records' linger ago: by then its holder hears "not held" anyway,
//! and nothing about it is left to tell. A node is deleted only after a
//! tick of its name shows it so by the leader's time, in a multi that holds
//! only if the name is unchanged since; its name's node and bucket, now
//! empty, go with ZooKeeper's container reaper. A bucket costs a listing
//! and, per name, a read; a broker sweeps about four buckets a second.

use std::{sync::Weak, time::Duration};

use zookeeper_client as zk;

use super::{
    layout::{bucket_path, name_of, NamePaths, BUCKETS},
    records::{judge, Judged},
    ZooKeeper,
};
use crate::{duration::millis, error::Result, store::contract::LINGER};

/// How often a broker sweeps a bucket.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// Sweeps a bucket every [`SWEEP_EVERY`], until the store is dropped.
pub(super) async fn run(zk: Weak<ZooKeeper>) {
    // Brokers start at different buckets, so that their passes spread.
    let mut bucket = u16::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            % u32::from(BUCKETS),
    )
    .unwrap_or(0);
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(zk) = zk.upgrade() else {
            return;
        };
        if let Err(e) = zk.sweep_bucket(bucket).await {
            tracing::debug!(error = %e, bucket, "ZooKeeper store: a bucket's sweep failed");
        }
        bucket = (bucket + 1) % BUCKETS;
    }
}

impl ZooKeeper {
    /// Sweeps the names of bucket `b`: the number of lease nodes deleted.
    pub async fn sweep_bucket(&self, b: u16) -> Result<usize> {
        let client = self.client().await?;
        let children = match self
            .bounded("a bucket's sweep", client.list_children(&bucket_path(b)))
            .await
        {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(super::classify("a bucket's sweep", &e)),
        };
        let mut swept = 0;
        for name in children.iter().filter_map(|child| name_of(child)) {
            swept += self.sweep_name(&client, &name).await?;
        }
        Ok(swept)
    }

    /// Deletes the name's lease nodes whose lease ended more than its
    /// lock-delay and the linger ago.
    async fn sweep_name(&self, client: &zk::Client, name: &str) -> Result<usize> {
        let paths = NamePaths::new(name, self.acls());
        let Some(read) = self.read(client, &paths, "").await? else {
            return Ok(0);
        };
        let Some(permits) = self.read_permits(client, &paths, &read.permits).await? else {
            return Ok(0);
        };
        let mut leases: Vec<(String, &super::records::Holding, &zk::Stat)> = Vec::new();
        if let Some((held, stat)) = &read.lock {
            leases.push((paths.lock(), held, stat));
        }
        for (held, stat) in &permits {
            leases.push((paths.permit(&held.token), held, stat));
        }
        // How long past its renewal a lease's node is kept.
        let kept = |held: &super::records::Holding| {
            held.ttl_ms
                .saturating_add(held.lock_delay_ms)
                .saturating_add(millis(LINGER))
        };
        let estimate = self.estimated_now().await?;
        leases.retain(|(_, held, stat)| {
            matches!(
                judge(super::leases::written_at(stat), kept(held), estimate),
                Judged::Ended(_)
            )
        });
        if leases.is_empty() {
            return Ok(0);
        }
        let Some((now, version)) = self.tick_name(client, &paths, read.version).await? else {
            return Ok(0);
        };
        leases.retain(|(_, held, stat)| {
            matches!(
                judge(super::leases::written_at(stat), kept(held), now),
                Judged::Ended(_)
            )
        });
        if leases.is_empty() {
            return Ok(0);
        }
        let mut writer = client.new_multi_writer();
        let added = (|| {
            writer.add_set_data(&paths.node, b"", Some(version))?;
            for (path, _, stat) in &leases {
                writer.add_delete(path, Some(stat.version))?;
            }
            Ok::<_, zk::Error>(())
        })();
        added.map_err(|e| super::failed("a sweep", &e))?;
        Ok(match self.commit("a sweep", &mut writer).await? {
            Some(_) => {
                tracing::debug!(
                    leases = leases.len(),
                    "ZooKeeper store: swept leases ended long ago"
                );
                leases.len()
            }
            None => 0,
        })
    }
}
