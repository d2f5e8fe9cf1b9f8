//! A contended run and its check, shared by the topology tests (Sentinel,
//! Cluster): workers cycle Acquire / Release on a few locks through a
//! broker while the test breaks the store underneath, recording each grant
//! as they saw it; [`check`] then asserts the lease contract on the record.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use leasehold_server::proto::{leasehold_client::LeaseholdClient, ReleaseRequest};
use tokio::time::Instant;
use tonic::{transport::Channel, Code};

use super::acquire_req;

/// One grant as its worker saw it.
#[derive(Clone, Debug)]
pub struct Held {
    pub lock: String,
    pub fence: u64,
    /// When the Acquire was sent.
    pub sent: Instant,
    /// When the grant's answer arrived.
    pub from: Instant,
    /// When the worker stopped relying on it: the release sent, or, if the
    /// release failed, the lease's deadline (request sent + TTL).
    pub until: Instant,
}

pub const TTL_MS: u64 = 2_000;

/// Cycles acquire (waiting) / release on `locks` until aborted, recording
/// every grant; any status other than ABORTED (wait ran out) or
/// UNAVAILABLE (the failover) fails the test.
pub async fn worker(
    mut client: LeaseholdClient<Channel>,
    id: usize,
    locks: &'static [&'static str],
    log: Arc<Mutex<Vec<Held>>>,
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
        log.lock().unwrap().push(Held {
            lock: lock.into(),
            fence: lease.fence,
            sent,
            from,
            until,
        });
    }
}

/// Per lock, in the order the grants arrived: fences strictly increase, and
/// no grant arrived before the previous holder stopped relying on its lease.
pub fn check(log: &[Held]) {
    let broken = violations(log);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Where `log` breaks what [`check`] asserts, one line per pair of
/// successive grants of a lock: for a test that must show a run *can* fail
/// the check.
pub fn violations(log: &[Held]) -> Vec<String> {
    let mut by_lock: std::collections::BTreeMap<&str, Vec<&Held>> = Default::default();
    for h in log {
        by_lock.entry(&h.lock).or_default().push(h);
    }
    let mut broken = Vec::new();
    for (lock, mut grants) in by_lock {
        grants.sort_by_key(|h| h.from);
        for pair in grants.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.fence <= a.fence {
                broken.push(format!(
                    "{lock}: fence {} granted after fence {}",
                    b.fence, a.fence
                ));
            }
            if b.from < a.until {
                broken.push(format!(
                    "{lock}: fence {} granted while fence {} was still relied on",
                    b.fence, a.fence
                ));
            }
        }
    }
    broken
}

/// A contended run in progress: `workers` cycling on `locks`.
pub struct Run {
    /// Every grant so far.
    pub log: Arc<Mutex<Vec<Held>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Run {
    /// Starts `workers` workers on `locks`, each with a client of its own
    /// from `connect`, and waits for their first 20 grants.
    pub async fn start<F, Fut>(locks: &'static [&'static str], workers: usize, connect: F) -> Self
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = LeaseholdClient<Channel>>,
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
            let after: Vec<Instant> = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|h| h.sent > since && lock.is_none_or(|l| h.lock == l))
                .map(|h| h.from)
                .collect();
            if after.len() >= count {
                return *after.iter().min().unwrap();
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
        check(&self.log.lock().unwrap());
    }
}
