//! The etcd side of `leasehold-bench cycles --etcd URL`: the same scenarios
//! with etcd's v3 lock service, as an etcd user would take a lock (a lease
//! per worker, `Lock` with it, `Unlock`), so that the comparison can be
//! reproduced with etcd from Debian's packages. And of `heartbeats --etcd
//! URL`: N etcd leases kept alive over S `LeaseKeepAlive` streams
//! ([`grant_many`], [`keep_alive_share`], [`revoke_many`]).

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use self::proto::{
    etcdserverpb::{
        lease_client::LeaseClient, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest,
    },
    v3lockpb::{lock_client::LockClient, LockRequest, UnlockRequest},
};
use crate::{
    cycles::{Failover, Handoffs, Run},
    soak::Tally,
};

/// etcd's lease and lock API, a client only (`proto/etcd/`).
mod proto {
    #![allow(missing_docs, clippy::all)]

    /// etcd's `etcdserverpb` package: leases.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }

    /// etcd's `v3lockpb` package: the lock service.
    pub mod v3lockpb {
        tonic::include_proto!("v3lockpb");
    }
}

/// A connection to etcd.
#[derive(Clone)]
pub struct Etcd {
    lease: LeaseClient<Channel>,
    lock: LockClient<Channel>,
}

impl Etcd {
    pub async fn connect(url: &str) -> Result<Self, String> {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .map_err(|e| format!("--etcd {url}: {e}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("cannot reach etcd at {url}: {e}"))?;
        Ok(Etcd {
            lease: LeaseClient::new(channel.clone()),
            lock: LockClient::new(channel),
        })
    }

    async fn grant(&mut self, ttl: Duration) -> Result<i64, String> {
        let granted = self
            .lease
            .lease_grant(LeaseGrantRequest {
                ttl: ttl.as_secs().max(1) as i64,
                id: 0,
            })
            .await
            .map_err(|s| format!("etcd LeaseGrant: {}", s.message()))?
            .into_inner();
        if !granted.error.is_empty() {
            return Err(format!("etcd LeaseGrant: {}", granted.error));
        }
        Ok(granted.id)
    }

    async fn revoke(&mut self, id: i64) {
        let _ = self.lease.lease_revoke(LeaseRevokeRequest { id }).await;
    }

    /// Waits for the lock, then holds it with `lease`; returns its key.
    async fn lock(&mut self, name: &str, lease: i64) -> Result<Vec<u8>, String> {
        Ok(self
            .lock
            .lock(LockRequest {
                name: name.as_bytes().to_vec(),
                lease,
            })
            .await
            .map_err(|s| format!("etcd Lock: {}", s.message()))?
            .into_inner()
            .key)
    }

    async fn unlock(&mut self, key: Vec<u8>) -> Result<(), String> {
        self.lock
            .unlock(UnlockRequest { key })
            .await
            .map_err(|s| format!("etcd Unlock: {}", s.message()))?;
        Ok(())
    }

    /// Keeps `lease` alive (a heartbeat every third of its TTL) until the
    /// task is aborted: aborting it is the holder's death.
    fn keep_alive(&self, lease: i64, ttl: Duration) -> tokio::task::JoinHandle<()> {
        let mut client = self.lease.clone();
        tokio::spawn(async move {
            let (tx, rx) = mpsc::channel(1);
            // Queued before the call: etcd answers the call's headers only
            // once the first request arrives.
            if tx.send(LeaseKeepAliveRequest { id: lease }).await.is_err() {
                return;
            }
            let Ok(response) = client.lease_keep_alive(ReceiverStream::new(rx)).await else {
                return;
            };
            let mut answers = response.into_inner();
            let mut tick = tokio::time::interval(ttl / 3);
            tick.tick().await;
            loop {
                if !matches!(answers.message().await, Ok(Some(_))) {
                    return;
                }
                tick.tick().await;
                if tx.send(LeaseKeepAliveRequest { id: lease }).await.is_err() {
                    return;
                }
            }
        })
    }
}

/// Each worker takes a lease of its own once, then cycles Lock+Unlock on a
/// lock of its own.
pub async fn uncontended(etcd: &Etcd, workers: usize, duration: Duration) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut etcd = etcd.clone();
        let name = format!("bench/cycles/{}/{workers}/{w}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let lease = etcd.grant(Duration::from_secs(60)).await?;
            let mut run = Run::default();
            while Instant::now() < end {
                let started = Instant::now();
                let key = etcd.lock(&name, lease).await?;
                run.latencies_us.push(started.elapsed().as_micros() as u64);
                etcd.unlock(key).await?;
                run.cycles += 1;
            }
            etcd.revoke(lease).await;
            Ok::<Run, String>(run)
        }));
    }
    crate::cycles::merge(tasks).await
}

/// `waiters` workers on one lock (etcd queues them by revision): handoffs,
/// handoff latency (Unlock sent to the next Lock answered), and the grants
/// of each worker.
pub async fn contended(
    etcd: &Etcd,
    waiters: usize,
    duration: Duration,
) -> Result<(Run, Vec<u64>), String> {
    let end = Instant::now() + duration;
    let name = format!("bench/contended/{}", std::process::id());
    let handoffs = Handoffs::default();
    let mut tasks = Vec::new();
    for worker in 0..waiters {
        let (mut etcd, name, handoffs) = (etcd.clone(), name.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            let lease = etcd.grant(Duration::from_secs(60)).await?;
            let mut grants = 0u64;
            while Instant::now() < end {
                let key = etcd.lock(&name, lease).await?;
                handoffs.granted(worker);
                grants += 1;
                handoffs.releasing(worker);
                etcd.unlock(key).await?;
            }
            etcd.revoke(lease).await;
            Ok::<u64, String>(grants)
        }));
    }
    handoffs.finish(tasks).await
}

/// A holder keeps a lease of `ttl` alive and holds the lock; a waiter calls
/// Lock; the holder dies (its keep-alive stops). etcd frees the lock when the
/// lease expires.
pub async fn failover(etcd: &Etcd, ttl: Duration, runs: usize) -> Result<Vec<Failover>, String> {
    let mut results = Vec::new();
    for run in 0..runs {
        let mut holder = etcd.clone();
        let name = format!("bench/failover/{}/{run}", std::process::id());
        let lease = holder.grant(ttl).await?;
        let keeper = holder.keep_alive(lease, ttl);
        holder.lock(&name, lease).await?;
        tokio::time::sleep(ttl + Duration::from_millis(getrandom::u64().unwrap_or(0) % 700)).await;

        let mut waiter = etcd.clone();
        let waiter_lease = waiter.grant(Duration::from_secs(60)).await?;
        let wait_name = name.clone();
        let granted = tokio::spawn(async move {
            let key = waiter.lock(&wait_name, waiter_lease).await;
            (Instant::now(), key, waiter)
        });
        // Give the waiter's Lock time to reach etcd before the death (etcd
        // has no way to tell that someone waits).
        tokio::time::sleep(Duration::from_millis(50)).await;
        keeper.abort();
        let killed = Instant::now();
        let (at, key, mut waiter) = granted.await.map_err(|e| e.to_string())?;
        waiter.unlock(key?).await?;
        waiter.revoke(waiter_lease).await;
        results.push(Failover {
            kill_to_grant: at.duration_since(killed),
            expiry_to_grant_ms: None,
            expiry_to_grant_in_store_ms: None,
        });
    }
    Ok(results)
}

/// Leases granted or revoked at once by [`grant_many`] and [`revoke_many`]
/// (over one connection: etcd batches the concurrent proposals into its
/// raft log, so a batch costs about one fsync).
const PARALLEL: usize = 128;

/// Grants `n` leases of `ttl` (whole seconds, at least etcd's minimum: it
/// raises a shorter TTL to it), [`PARALLEL`] at a time; their ids.
pub async fn grant_many(etcd: &Etcd, n: usize, ttl: Duration) -> Result<Vec<i64>, String> {
    let mut ids = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(PARALLEL);
        left -= batch;
        let grants = (0..batch).map(|_| {
            let mut etcd = etcd.clone();
            async move { etcd.grant(ttl).await }
        });
        for granted in futures_util::future::join_all(grants).await {
            ids.push(granted?);
        }
    }
    Ok(ids)
}

/// Revokes `leases`, [`PARALLEL`] at a time (a lease already gone is no
/// error worth stopping for: it is gone).
pub async fn revoke_many(etcd: &Etcd, leases: &[i64]) {
    for chunk in leases.chunks(PARALLEL) {
        let revokes = chunk.iter().map(|&id| {
            let mut etcd = etcd.clone();
            async move { etcd.revoke(id).await }
        });
        futures_util::future::join_all(revokes).await;
    }
}

/// Keeps `leases` alive over one `LeaseKeepAlive` stream until `end`, as
/// the broker's KeepAlive stream keeps its share: after `offset`, a
/// heartbeat every `interval`. etcd renews one lease per request message,
/// so a heartbeat is one request per lease, all sent at once, and its round
/// trip (into `tally`) runs from the first request sent to the last answer
/// received (etcd answers a stream's requests one by one, in order). A lease
/// is lost when its answer has a TTL of 0 or less (etcd's answer for a lease
/// it no longer has), and every lease of a heartbeat the stream failed in.
/// Returns the renewals etcd answered (keep-alives, for a rate).
pub async fn keep_alive_share(
    etcd: Etcd,
    leases: Vec<i64>,
    interval: Duration,
    offset: Duration,
    end: Instant,
    tally: Arc<Tally>,
) -> u64 {
    let lost = |count: usize| {
        tally.lost.fetch_add(count as u64, Ordering::Relaxed);
    };
    tokio::time::sleep(offset).await;
    let mut client = etcd.lease;
    // Room for a whole heartbeat: its requests go out back to back.
    let (tx, rx) = mpsc::channel(leases.len().max(1));
    let mut rx = Some(rx);
    let mut answers = None;
    let mut renewed = 0;
    let mut tick = tokio::time::interval(interval);
    while Instant::now() < end {
        tick.tick().await;
        let sent = Instant::now();
        for &id in &leases {
            if tx.send(LeaseKeepAliveRequest { id }).await.is_err() {
                lost(leases.len());
                return renewed;
            }
        }
        // The call opens with the first heartbeat queued: etcd answers the
        // call's headers only once the first request arrives.
        if let Some(rx) = rx.take() {
            match client.lease_keep_alive(ReceiverStream::new(rx)).await {
                Ok(response) => answers = Some(response.into_inner()),
                Err(_) => {
                    lost(leases.len());
                    return renewed;
                }
            }
        }
        let Some(stream) = answers.as_mut() else {
            return renewed;
        };
        for answered in 0..leases.len() {
            match stream.message().await {
                Ok(Some(answer)) => {
                    renewed += 1;
                    if answer.ttl <= 0 {
                        lost(1);
                    }
                }
                _ => {
                    lost(leases.len() - answered);
                    return renewed;
                }
            }
        }
        let rtt = sent.elapsed().as_micros() as u64;
        tally.heartbeats.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut rtts) = tally.rtts_us.lock() {
            rtts.push(rtt);
        }
    }
    renewed
}

/// The pid of the etcd serving `url` when it runs on this machine: the
/// process named `etcd` listening on the URL's port (its CPU and memory are
/// then read from /proc); else `None`.
pub fn local_pid(url: &str) -> Option<u32> {
    let uri: tonic::codegen::http::Uri = url.parse().ok()?;
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    crate::probe::listener_pid(port, "etcd")
}
