//! A contended run, shared by the topology tests (Sentinel, Cluster):
//! workers cycle Acquire / Release on a few locks through a broker while the
//! test breaks the store underneath, recording each grant as they saw it;
//! the history checker ([`crate::history`]) then asserts the lease contract
//! on the record.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use leasehold_server::proto::{leasehold_service_client::LeaseholdServiceClient, ReleaseRequest};
use tokio::time::Instant;
use tonic::{transport::Channel, Code};

use crate::{
    acquire_req,
    history::{self, Grant},
};

/// The TTL the workers' leases are granted for: a lease whose release got
/// no answer is taken as held until its Acquire's send time plus this.
pub const TTL_MS: u64 = 2_000;

/// Cycles acquire (waiting) / release on `locks` until aborted, recording
/// every grant; any status other than ABORTED (wait ran out) or
/// UNAVAILABLE (the failover) fails the test.
pub async fn worker(
    mut client: LeaseholdServiceClient<Channel>,
    id: usize,
    locks: &'static [&'static str],
    log: Arc<Mutex<Vec<Grant>>>,
) {
    let mut i = id;
    loop {
        let lock = locks[i % locks.len()];
        i += 1;
        let sent = Instant::now();
        let granted = client
            .acquire(acquire_req(lock, TTL_MS, &format!("w{id}"), 1_000))
            .await;
        let lease = match granted {
            Ok(r) => r.into_inner().lease.expect("a lease"),
            Err(s) if matches!(s.code(), Code::Unavailable | Code::Aborted) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(s) => panic!("acquire {lock}: unexpected {s:?}"),
        };
        let from = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let release_sent = Instant::now();
        let released = client
            .release(ReleaseRequest {
                name: lock.into(),
                owner_token: lease.owner_token,
            })
            .await;
        let until = match released {
            Ok(_) => release_sent,
            Err(s) if matches!(s.code(), Code::Unavailable | Code::NotFound) => {
                sent + Duration::from_millis(TTL_MS)
            }
            Err(s) => panic!("release {lock}: unexpected {s:?}"),
        };
        log.lock().unwrap().push(Grant::new(
            lock,
            id,
            lease.fence,
            sent.into_std(),
            from.into_std(),
            until.into_std(),
        ));
    }
}

/// A contended run in progress: `workers` cycling on `locks`.
pub struct Run {
    /// Every grant so far.
    pub log: Arc<Mutex<Vec<Grant>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Run {
    /// Starts `workers` workers on `locks`, each with a client of its own
    /// from `connect`, and waits for their first 20 grants.
    pub async fn start<F, Fut>(locks: &'static [&'static str], workers: usize, connect: F) -> Self
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = LeaseholdServiceClient<Channel>>,
    {
        let started = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for id in 0..workers {
            handles.push(tokio::spawn(worker(
                connect().await,
                id,
                locks,
                Arc::clone(&log),
            )));
        }
        let run = Run {
            log,
            workers: handles,
        };
        run.grants_after(None, started, 20).await;
        run
    }

    /// Waits until `count` grants (of `lock`, or of any lock) asked for
    /// after `since` are in the log; returns when the first of them arrived.
    pub async fn grants_after(&self, lock: Option<&str>, since: Instant, count: usize) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let after: Vec<std::time::Instant> = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|h| h.requested > since.into_std() && lock.is_none_or(|l| h.lock == l))
                .map(|h| h.granted)
                .collect();
            if after.len() >= count {
                return Instant::from_std(*after.iter().min().unwrap());
            }
            assert!(
                Instant::now() < deadline,
                "{count} grants of {lock:?} did not come within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the workers and checks the contract on every grant they saw.
    pub async fn stop_and_check(self) {
        for w in self.workers {
            w.abort();
            let _ = w.await;
        }
        history::assert_holds(&self.log.lock().unwrap());
    }
}
