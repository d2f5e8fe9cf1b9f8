//! The mutual-exclusion checker: many clients over several broker processes
//! on one Redis take a lock, write to a fenced resource while they hold it,
//! and release, while faults are injected. Every grant, write and release is
//! recorded, then checked by the history checker (the harness's `history`:
//! fences unique and in real-time order, writes refused only from paused
//! holders, no overlapping holders, no loss untold).
//!
//! Each scenario prints one line of figures. `LEASEHOLD_CHECK_SECS` sets how
//! long each runs (default 6 s; RELIABILITY.md has figures from longer runs):
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
    sample, scrape, BrokerProcess, PostgresServer, RedisServer,
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
    clients_of_brokers(&cluster.brokers).await
}

/// Clients connected to every broker of `brokers`.
async fn clients_of_brokers(brokers: &[BrokerProcess]) -> Vec<(Client, Option<Arc<Proxy>>)> {
    let urls: Vec<String> = brokers.iter().map(BrokerProcess::url).collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push((
            Client::connect_any(urls.clone()).await.expect("connect"),
            None,
        ));
    }
    clients
}

/// Clients each behind a proxy of its own (to one broker each), so that
/// one client's network can be cut or stalled.
async fn proxied_clients_of(cluster: &Cluster) -> Vec<(Client, Option<Arc<Proxy>>)> {
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let proxy = Arc::new(Proxy::start(cluster.brokers[i % BROKERS].addr).await);
        let client = Client::connect(format!("http://{}", proxy.addr()))
            .await
            .expect("connect");
        clients.push((client, Some(proxy)));
    }
    clients
}

/// The fault injector of a scenario without faults: waits out the run.
async fn no_faults() -> u64 {
    tokio::time::sleep(run_for()).await;
    0
}

/// Kills a random broker process with SIGKILL and restarts it, every 2 s
/// of the run; returns how many it killed.
async fn kill_brokers(brokers: Arc<tokio::sync::Mutex<Vec<BrokerProcess>>>) -> u64 {
    let end = Instant::now() + run_for();
    let mut faults = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let victim = random_below(BROKERS as u64) as usize;
        brokers.lock().await[victim].restart().await;
        faults += 1;
    }
    faults
}

/// The link between the brokers and their store (`link`) adds 20 ms of
/// latency, drops every connection, and stalls for 1.5 s (past the store
/// timeout), in turn, each for 0.7 s of every 1.4 s of the run.
async fn link_faults(link: Arc<Proxy>) -> u64 {
    let end = Instant::now() + run_for();
    let mut faults = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(700)).await;
        match faults % 3 {
            0 => link.set_latency(Duration::from_millis(20)),
            1 => link.drop_connections(),
            _ => {
                link.stall();
                tokio::time::sleep(Duration::from_millis(1_500)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        link.set_latency(Duration::ZERO);
        link.pass();
        faults += 1;
    }
    faults
}

/// Restarts the store server every 1.5 s of the run (`restart` blocks
/// until it is back).
async fn restart_store<S: Send + 'static>(server: Arc<Mutex<S>>, restart: fn(&mut S)) -> u64 {
    let end = Instant::now() + run_for();
    let mut faults = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let server = Arc::clone(&server);
        tokio::task::spawn_blocking(move || restart(&mut server.lock().unwrap()))
            .await
            .unwrap();
        faults += 1;
    }
    faults
}

/// No faults: the baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline() {
    let cluster = Cluster::start(RedisServer::start()).await;
    let clients = clients_of(&cluster).await;
    scenario("baseline", Faults::default(), clients, |_| no_faults()).await;
}

/// Holders paused past their TTL between their check and their write: the
/// late writes carry old fences and the resource refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_pauses() {
    let cluster = Cluster::start(RedisServer::start()).await;
    let clients = proxied_clients_of(&cluster).await;
    scenario(
        "gc_pauses",
        Faults {
            pause_probability: 0.2,
            ..Faults::default()
        },
        clients,
        |_| no_faults(),
    )
    .await;
}

/// Clients whose connections die mid-hold (a killed process, a cut cable):
/// every client talks through its own proxy, and random proxies drop all
/// their connections and black-hole the new ones for longer than the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cut_off() {
    let cluster = Cluster::start(RedisServer::start()).await;
    let clients = proxied_clients_of(&cluster).await;
    let proxies: Vec<Arc<Proxy>> = clients.iter().filter_map(|(_, p)| p.clone()).collect();
    scenario(
        "clients_cut_off",
        Faults::default(),
        clients,
        |_| async move {
            let end = Instant::now() + run_for();
            let mut faults = 0;
            while Instant::now() < end {
                let proxy = &proxies[random_below(CLIENTS as u64) as usize];
                proxy.stall();
                proxy.drop_connections();
                faults += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let healed = &proxies[random_below(CLIENTS as u64) as usize];
                healed.pass();
            }
            for proxy in &proxies {
                proxy.pass();
            }
            faults
        },
    )
    .await;
}

/// Broker processes killed with SIGKILL and restarted, one every 2 s. A
/// killed broker's waiters keep their place in line until it lapses (3 s),
/// which is what slows this scenario down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_killed() {
    let mut cluster = Cluster::start(RedisServer::start()).await;
    let clients = clients_of(&cluster).await;
    let brokers = std::mem::take(&mut cluster.brokers);
    let brokers = Arc::new(tokio::sync::Mutex::new(brokers));
    scenario("brokers_killed", Faults::default(), clients, |_| {
        kill_brokers(Arc::clone(&brokers))
    })
    .await;
}

/// The network between the brokers and Redis misbehaves: all broker-Redis
/// traffic goes through a proxy that in turn adds 20 ms of latency, drops
/// every connection, and stalls for 1.5 s (past the store timeout: calls
/// fail with UNAVAILABLE, leases can expire meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_link_faults() {
    let redis = RedisServer::start();
    let redis_addr = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let link = Arc::new(Proxy::start(redis_addr).await);
    let via_link = format!("redis://{}/", link.addr());
    let mut brokers = Vec::new();
    for _ in 0..BROKERS {
        brokers.push(BrokerProcess::start(&via_link).await);
    }
    let cluster = Cluster {
        redis: Arc::new(Mutex::new(redis)),
        brokers,
    };
    let clients = clients_of(&cluster).await;
    let faults = Faults {
        store_may_lose: false,
        ..Faults::default()
    };
    scenario("redis_link_faults", faults, clients, |_| link_faults(link)).await;
}

/// Redis stopped and restarted empty (no persistence): every lease is lost
/// and its holder told; fences keep rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty() {
    let cluster = Cluster::start(RedisServer::start()).await;
    redis_restarts("redis_restarted_empty", cluster, true).await;
}

/// Redis stopped and restarted with its append-only file: leases survive
/// when the restart is shorter than their TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_persistent() {
    let cluster = Cluster::start(RedisServer::start_persistent()).await;
    redis_restarts("redis_restarted_persistent", cluster, false).await;
}

async fn redis_restarts(name: &str, cluster: Cluster, store_may_lose: bool) {
    let clients = clients_of(&cluster).await;
    let restarter = Arc::clone(&cluster.redis);
    let faults = Faults {
        store_may_lose,
        ..Faults::default()
    };
    scenario(name, faults, clients, |_| {
        restart_store(restarter, RedisServer::restart)
    })
    .await;
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
            steps as u64
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

/// No faults, on the PostgreSQL store: its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_baseline() {
    let postgres = PostgresServer::start();
    let brokers = brokers_on(&postgres.url()).await;
    let clients = clients_of_brokers(&brokers).await;
    scenario("postgres_baseline", Faults::default(), clients, |_| {
        no_faults()
    })
    .await;
}

/// `BROKERS` broker processes on `url` (a PostgreSQL store).
async fn brokers_on(url: &str) -> Vec<BrokerProcess> {
    let mut brokers = Vec::new();
    for _ in 0..BROKERS {
        brokers.push(BrokerProcess::start(url).await);
    }
    brokers
}

/// The PostgreSQL store: broker processes killed with SIGKILL and
/// restarted, one every 2 s (as `brokers_killed` on Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_brokers_killed() {
    let postgres = PostgresServer::start();
    let brokers = brokers_on(&postgres.url()).await;
    let clients = clients_of_brokers(&brokers).await;
    let brokers = Arc::new(tokio::sync::Mutex::new(brokers));
    scenario(
        "postgres_brokers_killed",
        Faults::default(),
        clients,
        |_| kill_brokers(Arc::clone(&brokers)),
    )
    .await;
}

/// The PostgreSQL store: PostgreSQL stopped at once (an immediate shutdown,
/// like a crash) and restarted with its data every 1.5 s: leases and fences
/// survive; calls meanwhile fail UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted() {
    let postgres = Arc::new(Mutex::new(PostgresServer::start_durable()));
    let url = postgres.lock().unwrap().url();
    let brokers = brokers_on(&url).await;
    let clients = clients_of_brokers(&brokers).await;
    scenario("postgres_restarted", Faults::default(), clients, |_| {
        restart_store(Arc::clone(&postgres), PostgresServer::restart)
    })
    .await;
}

/// The PostgreSQL store: the network between the brokers and PostgreSQL
/// adds 20 ms of latency, drops every connection, and stalls for 1.5 s
/// (past the store timeout), in turn (as `redis_link_faults`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_link_faults() {
    let postgres = PostgresServer::start();
    let link = Arc::new(Proxy::start(([127, 0, 0, 1], postgres.port()).into()).await);
    let via_link = format!("postgres://postgres@{}/postgres", link.addr());
    let brokers = brokers_on(&via_link).await;
    let clients = clients_of_brokers(&brokers).await;
    scenario("postgres_link_faults", Faults::default(), clients, |_| {
        link_faults(link)
    })
    .await;
}

/// The PostgreSQL store fails over: a third into the run its primary stops
/// at once (like a crash) and 1.5 s later (past the store timeout and the
/// leases' TTL) its synchronous standby is promoted; the
/// brokers reach whichever server takes writes through a two-host URL
/// (`target_session_attrs=read-write`), with no restart. Synchronous
/// replication loses nothing a broker acknowledged, so nothing is excused:
/// the checks are those of a run without faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failover() {
    let primary = PostgresServer::start();
    let standby = Arc::new(primary.start_standby(true).await);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let brokers = brokers_on(&url).await;
    let clients = clients_of_brokers(&brokers).await;
    let primary = Arc::new(Mutex::new(primary));
    scenario("postgres_failover", Faults::default(), clients, |_| {
        let (primary, standby) = (Arc::clone(&primary), Arc::clone(&standby));
        async move {
            tokio::time::sleep(run_for() / 3).await;
            let crashed = Instant::now();
            tokio::task::spawn_blocking(move || primary.lock().unwrap().stop())
                .await
                .unwrap();
            // As a failover manager would: it takes a while to decide.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            standby.promote().await;
            let gap = crashed.elapsed();
            // The brokers did follow: the new primary commits their calls.
            let commits = || async {
                let n = standby
                    .psql(&["SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"])
                    .await;
                n.parse::<u64>().expect("a commit count")
            };
            let promoted = commits().await;
            tokio::time::sleep(run_for() * 2 / 3).await;
            let served = commits().await - promoted;
            println!(
                "postgres_failover: no primary for {gap:?}; then {served} commits on the \
                 promoted standby"
            );
            assert!(served >= 20, "the brokers did not follow: {served} commits");
            1
        }
    })
    .await;
}
