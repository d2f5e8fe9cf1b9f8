//! The model checker on every store: random clients (the harness's
//! `model::workload`) on a few names, over the store's brokers, while the
//! nemesis (`model::nemesis`) kills, stops, stalls, cuts, restarts and wipes;
//! then each name's history is checked against the executable contract
//! (`model::spec`) by a linearizability search (`model::linear`).
//!
//! `scripts/model-check [SECONDS] [STORE...]` runs it; through
//! `cargo test` (`./scripts/test`, the README's test command) each store runs for
//! `LEASEHOLD_MODEL_SECS` (default 12 s). A failure prints the seed, the
//! smallest sub-history found that still fails, where the whole history was
//! saved, and the commands that run the same workload again and check the
//! saved history again.
//!
//! Environment: `LEASEHOLD_MODEL_SECS`, `LEASEHOLD_MODEL_STORES`
//! (comma-separated: memory, redis, sentinel, cluster, postgres, standby;
//! default all),
//! `LEASEHOLD_MODEL_SEED` (default: random, printed),
//! `LEASEHOLD_MODEL_HISTORY` (check this saved history instead of running).

use leasehold_testkit as common;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{atomic::AtomicBool, atomic::Ordering, Arc, Mutex},
    time::Duration,
};

use common::model::{
    history::{format_op, parse_op, Op, Recorder},
    linear::{self, Verdict},
    nemesis::{self, Injected, StoreKind, Topology},
    spec::StoreClock,
    workload::{self, Resource, Tally},
};

/// Clients per run: enough that calls collide on three names.
const CLIENTS: usize = 6;
/// Brokers per shared store (the memory store has its one).
const BROKERS: usize = 2;
/// A broker's resident memory after a run, at most (the caps bound it far
/// below: streams, waiters, leases per connection).
const RSS_CAP: u64 = 256 << 20;

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().and_then(|s| s.parse().ok())
}

/// Whether the run checks `store`: every store `LEASEHOLD_MODEL_STORES`
/// names, or, when it names none, every store.
fn wanted(store: StoreKind) -> bool {
    match std::env::var("LEASEHOLD_MODEL_STORES") {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|s| s.trim() == store.name()),
        _ => true,
    }
}

fn history_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/model-check");
    std::fs::create_dir_all(&dir).expect("target/model-check");
    dir
}

/// How `store`'s clock reads TTLs: exact, but on etcd: whole-second
/// leases, revoked by its leader up to half a second late (then a Raft
/// write, and a loaded machine's scheduling: 1 s), and given their whole
/// TTL again by a leader that took over, which a restart of the one member
/// is (etcd#9888, the README says so): a lease may end up to its TTL (2 s
/// at most in the workload) plus that second late. Only when a lease ends
/// is stretched; who may hold it, and the fences, are checked as tightly.
fn clock_of(store: StoreKind) -> StoreClock {
    match store {
        StoreKind::Etcd => StoreClock {
            unit_ms: 1_000,
            late: 3_000_000,
        },
        // ZooKeeper's leases are judged by its leader's stamps, to the
        // millisecond: exact. (A new leader restamps the leases stamped by
        // the last one, lengthening them by up to their TTL, but the run's
        // one standalone server keeps its epoch across a restart: no new
        // leader, tests/zookeeper_failures.rs.)
        StoreKind::Memory
        | StoreKind::Redis
        | StoreKind::Sentinel
        | StoreKind::Cluster
        | StoreKind::Postgres
        | StoreKind::Standby
        | StoreKind::ZooKeeper => StoreClock::default(),
    }
}

/// Checks every name of `ops`; the findings, as text, empty if none.
fn check_all(ops: &[Op], clock: StoreClock) -> (Vec<String>, BTreeMap<String, u64>) {
    let mut findings = Vec::new();
    let mut visited = BTreeMap::new();
    let mut names: Vec<(String, Vec<Op>)> = linear::by_name(ops).into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, list) in names {
        let (list, verdict) = linear::check_deep(list, clock);
        match verdict {
            Verdict::Ok { visited: v } => {
                visited.insert(name, v);
            }
            Verdict::GaveUp { visited: v } => findings.push(format!(
                "name {name}: the search gave up after {v} configurations ({} calls): undecided",
                list.len()
            )),
            Verdict::Violation { stuck, prefix } => {
                let first = &list[stuck[0]];
                let small = std::thread::Builder::new()
                    .stack_size(512 << 20)
                    .spawn({
                        let list = list.clone();
                        let first = first.clone();
                        move || linear::minimize(&list, &first, 400, clock)
                    })
                    .unwrap()
                    .join()
                    .unwrap();
                findings.push(format!(
                    "name {name}: not linearizable: {prefix} of {} calls placed, then none of these could be:\n{}\nsmallest failing sub-history found ({} calls):\n{}",
                    list.len(),
                    stuck.iter().map(|&i| format!("  {}\n", format_op(&list[i]))).collect::<String>(),
                    small.len(),
                    linear::format(&small)
                ));
            }
        }
    }
    (findings, visited)
}

/// The brokers' counters against the history: every grant is counted in
/// `lease_acquired_total` once (a call without an answer may or may not
/// have been granted), every revoke that ended a lease in
/// `lease_lost_total{reason="revoked"}` once, and no more. Returns the
/// figures and the findings.
fn counters_match(ops: &[Op], scrapes: &[String]) -> (String, Vec<String>) {
    use common::model::spec::{Answer, Call};
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a counter's sample is a whole number, at least 0 and far below \
                  2^53: exact in f64 and in u64"
    )]
    let sum = |series: &str| -> u64 {
        scrapes
            .iter()
            .map(|s| common::sample(s, series) as u64)
            .sum()
    };
    let granted = ops
        .iter()
        .filter(|o| matches!(o.answer, Answer::Granted { .. }))
        .count() as u64;
    let unknown_acquires = ops
        .iter()
        .filter(|o| {
            matches!(
                (&o.call, &o.answer),
                (Call::Acquire { .. }, Answer::Unknown)
            )
        })
        .count() as u64;
    let mut revoked_fences: Vec<u64> = ops
        .iter()
        .filter_map(|o| match o.answer {
            Answer::Revoked { fence } => Some(fence),
            _ => None,
        })
        .collect();
    revoked_fences.sort();
    revoked_fences.dedup();
    let revoked = revoked_fences.len() as u64;
    let unknown_revokes = ops
        .iter()
        .filter(|o| o.call == Call::Revoke && o.answer == Answer::Unknown)
        .count() as u64;
    let acquired_total = sum("lease_acquired_total");
    let revoked_total = sum("lease_lost_total{reason=\"revoked\"}");
    let mut findings = Vec::new();
    if acquired_total < granted || acquired_total > granted + unknown_acquires {
        findings.push(format!("lease_acquired_total is {acquired_total}: the clients were granted {granted} leases, and {unknown_acquires} acquires got no answer"));
    }
    if revoked_total < revoked || revoked_total > revoked + unknown_revokes {
        findings.push(format!("lease_lost_total{{reason=\"revoked\"}} is {revoked_total}: {revoked} leases were revoked, and {unknown_revokes} revokes got no answer"));
    }
    (
        format!("lease_acquired_total {acquired_total} for {granted} grants (+{unknown_acquires} unanswered), revoked {revoked_total} for {revoked} (+{unknown_revokes})"),
        findings,
    )
}

async fn run_store(store: StoreKind) {
    if !wanted(store) {
        println!(
            "model-check {}: not selected (LEASEHOLD_MODEL_STORES)",
            store.name()
        );
        return;
    }
    if std::env::var("LEASEHOLD_MODEL_HISTORY").is_ok() {
        return;
    }
    let secs = env_u64("LEASEHOLD_MODEL_SECS").unwrap_or(12);
    let seed = env_u64("LEASEHOLD_MODEL_SEED").unwrap_or_else(|| {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        u64::from_le_bytes(b) >> 16
    });
    let topology = Topology::start(store, BROKERS).await;
    let urls = topology.broker_urls();
    let record = Arc::new(Recorder::new());
    let tally = Arc::new(Tally::default());
    let injected = Arc::new(Mutex::new(Injected::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let stop_faults = Arc::new(AtomicBool::new(false));
    let nemesis = tokio::spawn(nemesis::run(
        topology,
        seed,
        record.clone(),
        injected.clone(),
        stop_faults.clone(),
    ));
    let clients = tokio::spawn(workload::run(
        seed,
        CLIENTS,
        urls,
        record.clone(),
        tally.clone(),
        Arc::new(Resource::default()),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    // Faults end first, so that the clients' last calls (giving back what
    // they hold) meet a healed system.
    stop_faults.store(true, Ordering::Relaxed);
    let topology = nemesis.await.expect("the nemesis does not panic");
    stop.store(true, Ordering::Relaxed);
    clients.await.expect("the clients do not panic");

    let ops = record.ops();
    let file = history_dir().join(format!("{}-{seed}.history", store.name()));
    std::fs::write(
        &file,
        ops.iter().map(|o| format_op(o) + "\n").collect::<String>(),
    )
    .unwrap();
    let (mut findings, visited) = check_all(&ops, clock_of(store));
    findings.extend(
        tally
            .surprises
            .lock()
            .unwrap()
            .iter()
            .map(|s| format!("an answer outside the contract: {s}")),
    );
    for broker in &topology.brokers {
        let rss = broker.rss();
        if rss > RSS_CAP {
            findings.push(format!(
                "broker {} holds {} MiB after the run (cap {} MiB)",
                broker.url(),
                rss >> 20,
                RSS_CAP >> 20
            ));
        }
    }
    // Whatever restarted: no broker may count a lease lost by the store
    // unless the store lost data (the critical alert LeaseholdStoreLostLeases
    // fires on it).
    let wiped = ops
        .iter()
        .any(|o| o.call == common::model::spec::Call::Wipe);
    if !wiped {
        for broker in &topology.brokers {
            let text = common::scrape(broker.metrics_addr).await;
            let store_lost = common::sample(&text, "lease_lost_total{reason=\"store_lost\"}");
            if store_lost > 0.0 {
                findings.push(format!(
                    "broker {} counted {store_lost} leases lost by the store, but the store lost nothing",
                    broker.url()
                ));
            }
        }
    }
    let restarted = injected
        .lock()
        .unwrap()
        .counts
        .contains_key(&nemesis::Fault::KillBroker);
    let metrics = if restarted {
        "not checked (a broker restarted: its counters began again)".to_owned()
    } else {
        let mut scrapes = Vec::new();
        for broker in &topology.brokers {
            scrapes.push(common::scrape(broker.metrics_addr).await);
        }
        let (text, found) = counters_match(&ops, &scrapes);
        findings.extend(found);
        text
    };
    let faults: Vec<String> = injected
        .lock()
        .unwrap()
        .counts
        .iter()
        .map(|(f, n)| format!("{}: {n}", f.name()))
        .collect();
    println!(
        "model-check {} seed={seed} secs={secs}: {} calls ({} without an answer, {} refused), {} recorded, streams opened {} reset {} half-closed {}, writes {} ({} refused, {} paused holders); faults: {}; configurations searched per name: {visited:?}; counters: {metrics}; violations: {}",
        store.name(),
        tally.calls.load(Ordering::Relaxed),
        tally.unknown.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        ops.len(),
        tally.streams_opened.load(Ordering::Relaxed),
        tally.streams_reset.load(Ordering::Relaxed),
        tally.streams_half_closed.load(Ordering::Relaxed),
        tally.writes.load(Ordering::Relaxed),
        tally.writes_refused.load(Ordering::Relaxed),
        tally.pauses.load(Ordering::Relaxed),
        if faults.is_empty() { "none".into() } else { faults.join(", ") },
        findings.len(),
    );
    assert!(
        ops.len() as u64 >= secs * 5,
        "only {} calls recorded in {secs} s: the workload did not run",
        ops.len()
    );
    if !findings.is_empty() {
        panic!(
            "model-check {} seed={seed}: {} finding(s)\n\n{}\n\nthe whole history: {}\nrun the same workload again: LEASEHOLD_MODEL_SEED={seed} scripts/model-check {secs} {}\ncheck this history again: LEASEHOLD_MODEL_HISTORY={} scripts/model-check",
            store.name(),
            findings.len(),
            findings.join("\n\n"),
            file.display(),
            store.name(),
            file.display()
        );
    }
}

/// The model checker on one store or topology: a module named after it
/// with the test `model_check` (`scripts/model-check` runs them all).
macro_rules! model_check_on {
    ($store:ident, $kind:ident) => {
        mod $store {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn model_check() {
                super::run_store(super::StoreKind::$kind).await;
            }
        }
    };
}

// Every backend of the harness's one list, on one server of its own...
common::for_each_backend!(model_check_on);
// ...and the topologies beyond one server.
model_check_on!(sentinel, Sentinel);
model_check_on!(cluster, Cluster);
model_check_on!(standby, Standby);

/// `LEASEHOLD_MODEL_HISTORY=file`: checks a saved history again, without
/// any server (deterministic: the search alone).
#[test]
fn recheck_a_saved_history() {
    let Ok(path) = std::env::var("LEASEHOLD_MODEL_HISTORY") else {
        return;
    };
    let text = std::fs::read_to_string(&path).expect("the saved history");
    let ops: Vec<Op> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_op(l).expect("a history line"))
        .collect();
    // The store is the history file's first word (`etcd-<seed>.history`).
    let clock = std::path::Path::new(&path)
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.split('-').next())
        .and_then(StoreKind::parse)
        .map_or_else(StoreClock::default, clock_of);
    let (findings, visited) = check_all(&ops, clock);
    println!(
        "{path}: {} calls, configurations searched per name: {visited:?}",
        ops.len()
    );
    assert!(findings.is_empty(), "{}", findings.join("\n\n"));
}
