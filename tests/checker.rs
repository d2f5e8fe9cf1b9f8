//! The two scenarios of the first checker that the model checker
//! (tests/model_check.rs, which took over every other one: faults on
//! brokers, links and stores, GC pauses, restarts, wipes, failovers) does
//! not run: Redis' clock stepped an hour back with every broker restarted
//! (so that no fence floor remembers), and stepped forward; each asserts
//! the fences and also that every broker counted the step in
//! `leasehold_store_clock_jumps_total`. The model checker steps the clock by
//! a second or two only: an hour's step back holds every lease alive then
//! for an hour, which would leave the rest of its run without grants.
//! Many clients over several broker processes take a lock, write to a
//! fenced resource while they hold it, and release; every grant, write and
//! release is checked by the harness's `history` (fences unique and in
//! real-time order, writes refused only from paused holders, no
//! overlapping holders, no loss untold).
//!
//! `LEASEHOLD_CHECK_SECS` sets how long each runs (default 6 s):
//!
//! ```sh
//! LEASEHOLD_CHECK_SECS=60 cargo test --release --test checker -- --nocapture --test-threads 1
//! ```

use leasehold_testkit as common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{
    eventually,
    history::{self, Excuses, FencedResource, Findings, Grant},
    proxy::Proxy,
    sample, scrape, BrokerProcess, RedisServer,
};
use leasehold_client::{AcquireOptions, Client, ClientError};

const CLIENTS: usize = 32;
const BROKERS: usize = 3;
const TTL: Duration = Duration::from_millis(1_000);

fn run_for() -> Duration {
    let secs = std::env::var("LEASEHOLD_CHECK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    Duration::from_secs(secs)
}

#[derive(Default)]
struct Record {
    held: Mutex<Vec<Grant>>,
    resource: Mutex<FencedResource>,
    ops: AtomicU64,
    errors: AtomicU64,
    /// Steps of Redis' clock: just before and just after each took effect.
    clock_steps: Mutex<Vec<(Instant, Instant)>>,
}

/// What a fault injector can reach besides its own faults.
#[derive(Clone)]
struct Control {
    record: Arc<Record>,
    /// Every client holds this for reading from the start of an Acquire to
    /// the end of its lease: taken for writing, it means no lease is held,
    /// requested or being released, and none starts until it is dropped.
    turns: Arc<tokio::sync::RwLock<()>>,
}

/// Fault knobs that a scenario turns on.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// Chance per hold that the holder is paused past its TTL between its
    /// check and its write (the GC pause of the fencing story).
    pause_probability: f64,
    /// Redis may lose its data: a holder then learns of its loss only at
    /// its next heartbeat (or release), and until then the fence alone keeps
    /// the resource safe. Overlaps and refused writes are allowed for leases
    /// whose holder did learn of their loss.
    store_may_lose: bool,
    /// Redis' clock steps forward (recorded in `Record::clock_steps`):
    /// leases alive at a step expire early, so their holders can be
    /// overtaken. Overlaps and refused writes of a lease granted before a
    /// step, overtaken after it, are counted apart as caused by the jump;
    /// the fence must still hold (any other refusal or overlap fails).
    clock_forward: bool,
}

struct Cluster {
    redis: Arc<Mutex<RedisServer>>,
    brokers: Vec<BrokerProcess>,
}

impl Cluster {
    async fn start(redis: RedisServer) -> Cluster {
        let mut brokers = Vec::new();
        for _ in 0..BROKERS {
            brokers.push(BrokerProcess::start(&redis.url()).await);
        }
        Cluster {
            redis: Arc::new(Mutex::new(redis)),
            brokers,
        }
    }
}

fn random_below(n: u64) -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    u64::from_le_bytes(bytes) % n.max(1)
}

fn chance(p: f64) -> bool {
    (random_below(1_000_000) as f64) < p * 1_000_000.0
}

/// One client's life: take the lock, write while holding it, release; until
/// `stop`. Records every lease.
async fn client_loop(
    id: usize,
    client: Client,
    proxy: Option<Arc<Proxy>>,
    record: Arc<Record>,
    faults: Faults,
    stop: Arc<AtomicBool>,
    turns: Arc<tokio::sync::RwLock<()>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let _turn = turns.read().await;
        record.ops.fetch_add(1, Ordering::Relaxed);
        let requested = Instant::now();
        let lease = match client
            .acquire(
                "checked",
                AcquireOptions::new()
                    .ttl(TTL)
                    .wait(Duration::from_millis(1_500))
                    .holder(format!("c{id}")),
            )
            .await
        {
            Ok(lease) => lease,
            Err(ClientError::NotAcquired(_)) => continue,
            Err(_) => {
                // Faults make calls fail (UNAVAILABLE); that is allowed.
                record.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let granted = Instant::now();
        let mut held = Grant::new("checked", id, lease.fence(), requested, granted, granted);
        let writes = 1 + random_below(4);
        for _ in 0..writes {
            if lease.check().is_err() {
                held.lost = true;
                held.told = true;
                break;
            }
            held.until = Instant::now();
            if let Some(proxy) = proxy.as_ref().filter(|_| chance(faults.pause_probability)) {
                // The whole client is paused after the check, before the
                // write (a GC pause): its heartbeats stop too, so the lease
                // expires and the lock moves on; the late write carries the
                // old fence.
                held.paused = true;
                proxy.stall();
                tokio::time::sleep(TTL + Duration::from_millis(500)).await;
                proxy.pass();
            }
            if !record.resource.lock().unwrap().write(held.fence) {
                held.stale_writes_refused += 1;
                held.refused_at.get_or_insert_with(Instant::now);
            }
            tokio::time::sleep(Duration::from_millis(random_below(40))).await;
        }
        if !held.lost {
            held.until = held
                .until
                .max(Instant::now().min(lease.deadline().into_std()));
            match lease.release().await {
                Ok(()) => {}
                Err(ClientError::Lost(_)) => {
                    // Gone by the time the release arrived (it expired after
                    // the last write while the release was on its way, or
                    // the store lost it).
                    held.lost = true;
                    held.told = true;
                    held.told_at_release = true;
                }
                Err(_) => {
                    record.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        record.held.lock().unwrap().push(held);
    }
}

/// The history checker on a record: what breaks the contract, and what
/// the faults a scenario injected (data loss, clock steps) explain.
fn check(record: &Record, faults: Faults) -> Findings {
    let held = record.held.lock().unwrap().clone();
    let excuses = Excuses {
        store_may_lose: faults.store_may_lose,
        clock_steps: if faults.clock_forward {
            record.clock_steps.lock().unwrap().clone()
        } else {
            Vec::new()
        },
        ttl: TTL,
    };
    history::check(&held, &excuses)
}

/// Runs `CLIENTS` clients for the scenario's time, with `inject` running
/// faults meanwhile; prints the figures and asserts no violation. Returns
/// the number of faults `inject` reported.
async fn scenario<F, Fut>(
    name: &str,
    faults: Faults,
    clients: Vec<(Client, Option<Arc<Proxy>>)>,
    inject: F,
) -> u64
where
    F: FnOnce(Control) -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(tokio::sync::RwLock::new(()));
    let mut tasks = Vec::new();
    for (id, (client, proxy)) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(client_loop(
            id,
            client,
            proxy,
            Arc::clone(&record),
            faults,
            Arc::clone(&stop),
            Arc::clone(&turns),
        )));
    }
    let injected = inject(Control {
        record: Arc::clone(&record),
        turns,
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        // A client can be mid-wait: bounded by its wait and a pause.
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    let findings = check(&record, faults);
    let violations = &findings.violations;
    let held = record.held.lock().unwrap();
    let resource = record.resource.lock().unwrap();
    let lost = held.iter().filter(|h| h.lost).count();
    let told = held.iter().filter(|h| h.lost && h.told).count();
    let told_at_release = held.iter().filter(|h| h.told_at_release).count();
    let pauses = held.iter().filter(|h| h.paused).count() as u64;
    let jumps = if faults.clock_forward {
        format!(
            " overlaps_caused_by_clock_jump={} refused_writes_caused_by_clock_jump={}",
            findings.clock_jump_overlaps, findings.clock_jump_refused
        )
    } else {
        String::new()
    };
    println!(
        "scenario={name} ops={} grants={} writes_accepted={} writes_refused={} faults={} \
         call_errors={} leases_lost={lost} lost_and_told={told} (at_release={told_at_release}) violations={}{jumps}",
        record.ops.load(Ordering::Relaxed),
        held.len(),
        resource.accepted,
        resource.rejected,
        injected + pauses,
        record.errors.load(Ordering::Relaxed),
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "{name}: violations:\n{}",
        violations.join("\n")
    );
    assert!(
        held.len() >= 5,
        "{name}: only {} grants: the scenario did not exercise the lock",
        held.len()
    );
    injected
}

/// Clients connected to every broker.
async fn clients_of(cluster: &Cluster) -> Vec<(Client, Option<Arc<Proxy>>)> {
    let urls: Vec<String> = cluster.brokers.iter().map(BrokerProcess::url).collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push((
            Client::connect_any(urls.clone()).await.expect("connect"),
            None,
        ));
    }
    clients
}

/// How far each step of `redis_clock_step_forward` moves Redis' clock: ten
/// TTLs, so every lease alive at the step expires at once.
const STEP_FORWARD: i64 = 10;

/// How far each step of `redis_clock_step_back` moves it.
const STEP_BACK: i64 = 3_600;

/// The clock steps each broker counted in `direction`, once every broker
/// has pinged since the last step (pings come every second).
async fn clock_jumps_counted(brokers: &[BrokerProcess], direction: &str) -> Vec<f64> {
    let series = format!("leasehold_store_clock_jumps_total{{direction=\"{direction}\"}}");
    let mut counts = Vec::new();
    for broker in brokers {
        eventually(Duration::from_secs(10), "a clock step counted", || async {
            sample(&scrape(broker.metrics_addr).await, &series) > 0.0
        })
        .await;
        counts.push(sample(&scrape(broker.metrics_addr).await, &series));
    }
    counts
}

/// Restarts every broker (SIGKILL, then the same address) and waits until
/// each has pinged Redis (its `leasehold_store_up` is 1): its fence floor starts from
/// nothing, and it has read Redis' clock before any step to come.
async fn restart_all(brokers: &mut [BrokerProcess]) {
    for broker in brokers.iter_mut() {
        broker.restart().await;
        eventually(
            Duration::from_secs(10),
            "leasehold_store_up after a restart",
            || async { sample(&scrape(broker.metrics_addr).await, "leasehold_store_up") == 1.0 },
        )
        .await;
    }
}

/// Redis' clock stepped an hour back twice, with every broker restarted
/// each time so that no broker's fence floor remembers the fences issued
/// before: once after every lease has ended and Redis has forgotten the name
/// (nothing left in Redis for it), once while leases are held. Leases held
/// at a step outlive their TTL by an hour (clients here release theirs);
/// fences must still rise, with no violation of any kind; and every broker
/// counted the steps it saw in its metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clock_step_back() {
    let mut cluster = Cluster::start(RedisServer::start_faketime()).await;
    let clients = clients_of(&cluster).await;
    let brokers = Arc::new(tokio::sync::Mutex::new(std::mem::take(
        &mut cluster.brokers,
    )));
    let redis = Arc::clone(&cluster.redis);
    let url = redis.lock().unwrap().url();
    let restarter = Arc::clone(&brokers);
    scenario(
        "redis_clock_step_back",
        Faults::default(),
        clients,
        |control| async move {
            let third = run_for() / 3;
            tokio::time::sleep(third).await;

            // After the leases ended: nobody holds or waits, and Redis has
            // nothing left of the name (released leases, lingering hashes
            // and queues all gone).
            {
                let _quiet = control.turns.write().await;
                let conn = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                eventually(Duration::from_secs(30), "Redis forgot the name", || {
                    let mut conn = conn.clone();
                    async move {
                        let left: u64 = redis::cmd("EXISTS")
                            .arg("test:{checked}")
                            .arg("test:{checked}:line")
                            .arg("test:{checked}:until")
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        left == 0
                    }
                })
                .await;
                restart_all(&mut restarter.lock().await).await;
                redis.lock().unwrap().set_clock_offset(-STEP_BACK);
            }
            tokio::time::sleep(third).await;

            // While leases are held: another hour back. Once every lease
            // granted before the step has been released or renewed, and
            // every waiter has renewed its place (both by the stepped
            // clock), the brokers restart: a lease or place orphaned by a
            // restart then ends in its TTL, not in an hour.
            redis.lock().unwrap().set_clock_offset(-2 * STEP_BACK);
            tokio::time::sleep(TTL + Duration::from_millis(1_000)).await;
            // The brokers saw the steps before they go.
            let counted = clock_jumps_counted(&restarter.lock().await, "backward").await;
            assert!(
                counted.iter().all(|&c| c >= 1.0),
                "backward steps counted per broker: {counted:?}"
            );
            restart_all(&mut restarter.lock().await).await;
            tokio::time::sleep(third).await;
            2
        },
    )
    .await;
}

/// Redis' clock stepped forward by ten TTLs every 2 s: every lease alive at
/// a step expires at once, the one fault a Redis lease cannot hide, so its
/// holder can be overtaken while it still believes it holds. The fence must
/// still hold: the resource refuses the overtaken holder's later writes,
/// fences follow grant order, and every other overlap or refusal fails the
/// test. The overlaps the steps cause are counted and printed, not hidden;
/// and every broker counted the steps in its metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clock_step_forward() {
    let cluster = Cluster::start(RedisServer::start_faketime()).await;
    let clients = clients_of(&cluster).await;
    let redis = Arc::clone(&cluster.redis);
    let faults = Faults {
        clock_forward: true,
        ..Faults::default()
    };
    let steps = scenario(
        "redis_clock_step_forward",
        faults,
        clients,
        |control| async move {
            let end = Instant::now() + run_for();
            let mut steps = 0;
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(2_000)).await;
                steps += 1;
                let before = Instant::now();
                redis.lock().unwrap().set_clock_offset(steps * STEP_FORWARD);
                let effective = Instant::now();
                control
                    .record
                    .clock_steps
                    .lock()
                    .unwrap()
                    .push((before, effective));
            }
            u64::try_from(steps).expect("the steps count up from 0")
        },
    )
    .await;
    let counted = clock_jumps_counted(&cluster.brokers, "forward").await;
    // Two steps within one ping interval may be seen as one.
    assert!(
        counted.iter().all(|&c| c >= 1.0 && c <= steps as f64),
        "forward steps counted per broker: {counted:?} of {steps}"
    );
}
