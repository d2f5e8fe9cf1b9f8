//! The plain Redis lock: what a Redis user writes by hand, with none of the
//! broker's scripts. Acquire is one script (`SET key token NX PX ttl` and
//! `INCR` of the lock's fence counter: the fence, or nil when taken),
//! release a compare-and-delete script; a waiter polls (tries again after a
//! short sleep), as such users do: there is no wait line, so nothing makes
//! the handoffs fair. A baseline that is not the broker's own floor (the
//! "direct" side): readers see the broker against what they would otherwise
//! write.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::{
    cycles::{Handoffs, Run},
    stats::micros,
};

/// The acquire script (see its header).
const ACQUIRE: &str = include_str!("../lua/plain_acquire.lua");
/// The release script (see its header).
const RELEASE: &str = include_str!("../lua/plain_release.lua");

/// A connection to Redis with both scripts loaded (called by `EVALSHA`, as
/// a client library does), shared by every worker as one multiplexed
/// connection, the way the broker's store shares its own.
#[derive(Clone)]
pub struct PlainLock {
    url: String,
    conn: MultiplexedConnection,
    acquire: String,
    release: String,
    prefix: String,
}

impl PlainLock {
    /// Whether the store URL names one Redis server (the plain lock's
    /// setting; not a Sentinel set or a Cluster, nor the memory store).
    pub fn supports(url: &str) -> bool {
        ["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|scheme| url.starts_with(scheme))
    }

    /// Connects to the Redis at `url` (Nagle off, as Jedis and Lettuce and
    /// the broker's store do) and loads the scripts; keys go under `prefix`.
    pub async fn connect(url: String, prefix: String) -> Result<Self, String> {
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
            .map_err(|e| format!("bad Redis URL: {e}"))?
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let mut conn = redis::Client::open(info)
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("cannot reach Redis: {e}"))?;
        let acquire = load(&mut conn, ACQUIRE).await?;
        let release = load(&mut conn, RELEASE).await?;
        Ok(PlainLock {
            url,
            conn,
            acquire,
            release,
            prefix,
        })
    }

    /// Another connection to the same Redis, with the same scripts and keys
    /// (for a worker with a connection of its own).
    pub async fn another(&self) -> Result<Self, String> {
        Self::connect(self.url.clone(), self.prefix.clone()).await
    }

    /// The connection (for other reads of the bench's).
    pub fn connection(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// Tries once to take `name` for `ttl_ms`: the fence, or `None` when
    /// someone has it.
    pub async fn acquire(
        &mut self,
        name: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<Option<u64>, String> {
        redis::cmd("EVALSHA")
            .arg(&self.acquire)
            .arg(2)
            .arg(format!("{}{name}", self.prefix))
            .arg(format!("{}{name}:fence", self.prefix))
            .arg(token)
            .arg(ttl_ms)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| format!("plain acquire: {e}"))
    }

    /// Releases `name` if `token` still holds it; whether it did.
    pub async fn release(&mut self, name: &str, token: &str) -> Result<bool, String> {
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&self.release)
            .arg(1)
            .arg(format!("{}{name}", self.prefix))
            .arg(token)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| format!("plain release: {e}"))?;
        Ok(released == 1)
    }
}

/// Loads a script; its SHA1 for `EVALSHA`.
async fn load(conn: &mut MultiplexedConnection, source: &str) -> Result<String, String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(conn)
        .await
        .map_err(|e| format!("SCRIPT LOAD: {e}"))
}

/// A token as a user would make one: random, unique per acquire.
fn token() -> String {
    format!(
        "{:016x}{:016x}",
        getrandom::u64().unwrap_or(0),
        getrandom::u64().unwrap_or(1)
    )
}

/// `workers` workers, each cycling acquire+release on a lock of its own
/// (every acquire must be granted). Latencies: the acquires'.
pub async fn uncontended(
    locks: Vec<PlainLock>,
    workers: usize,
    duration: Duration,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut lock = locks[w % locks.len()].clone();
        let name = format!("bench/cycles/{}/{workers}/{w}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            while Instant::now() < end {
                let token = token();
                let started = Instant::now();
                if lock.acquire(&name, &token, 10_000).await?.is_none() {
                    return Err(format!("plain acquire of {name} refused uncontended"));
                }
                run.latencies_us.push(micros(started.elapsed()));
                lock.release(&name, &token).await?;
                run.cycles += 1;
            }
            Ok::<Run, String>(run)
        }));
    }
    crate::cycles::merge(tasks).await
}

/// `waiters` workers on one lock, each polling for it every `retry` (the
/// hand-written lock has no wait line), holding it for no time and
/// releasing it. Returns the handoffs and each worker's grants.
pub async fn contended(
    lock: PlainLock,
    waiters: usize,
    duration: Duration,
    retry: Duration,
) -> Result<(Run, Vec<u64>), String> {
    let end = Instant::now() + duration;
    let name = format!("bench/contended/{}", std::process::id());
    let handoffs = Handoffs::default();
    let mut tasks = Vec::new();
    for worker in 0..waiters {
        let (mut lock, name, handoffs) = (lock.clone(), name.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            while Instant::now() < end {
                let token = token();
                if lock.acquire(&name, &token, 10_000).await?.is_none() {
                    tokio::time::sleep(retry).await;
                    continue;
                }
                handoffs.granted(worker);
                grants += 1;
                handoffs.releasing(worker);
                lock.release(&name, &token).await?;
            }
            Ok::<u64, String>(grants)
        }));
    }
    handoffs.finish(tasks).await
}
