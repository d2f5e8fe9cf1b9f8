//! The rules of deploy/prometheus/rules.yaml in a real Prometheus (Debian's
//! `prometheus` package, which scripts/test installs): two `leasehold serve`
//! processes on one real Redis, scraped every second, the rules evaluated
//! every second from a copy of the file whose `for:` durations are cut to
//! 1 s (generated here from the real file, so the two cannot drift). Through
//! Prometheus' HTTP API it checks that:
//!
//! - every rule of every group evaluates without error, and every panel
//!   query of the Grafana dashboard answers with data;
//! - healthy traffic (grants, renewals, contended waits and releases on both
//!   brokers) fires no alert, not even a pending one;
//! - the faults fire the alerts meant for them: holders killed with SIGKILL
//!   (`LeaseholdLeaseLossSpike`, reason `expired`), Redis given a memory
//!   limit with an evicting policy (`LeaseholdStoreUnsafe`), Redis stopped
//!   (`LeaseholdStoreDown` on both brokers), a broker killed
//!   (`LeaseholdBrokerDown` for it), then the other
//!   (`LeaseholdAllBrokersDown`).
//!
//! Without a `prometheus` binary the test fails and says how to get one;
//! outside CI, `LEASEHOLD_SKIP_PROMETHEUS=1` skips it (saying so).

use leasehold_testkit as common;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{free_port, scrape, BrokerProcess, RedisServer};
use leasehold_client::{AcquireOptions, Client};
use serde_json::Value;

/// The job the rules select and the scrape config names.
const JOB: &str = "leasehold";

/// Holders killed at once: over the 5-minute window of
/// `LeaseholdLeaseLossSpike`, more than its 0.05 losses a second (15).
const VICTIMS: usize = 20;

/// Quiet time watched for alerts under healthy traffic: eight rounds of
/// scrapes and evaluations, each of which could start a pending alert (and,
/// with `for:` at 1 s, fire it).
const HEALTHY_WATCH: Duration = Duration::from_secs(8);

/// The `prometheus` binary: `$LEASEHOLD_PROMETHEUS`, else on the PATH.
fn prometheus_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LEASEHOLD_PROMETHEUS") {
        return Some(path.into());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("prometheus"))
            .find(|p| p.is_file())
    })
}

/// The rules file with every `for:` cut to 1 s (the test cannot wait the
/// minutes the real durations ask for), and how many were cut.
fn shortened_rules(rules: &str) -> (String, usize) {
    let mut cut = 0;
    let lines: Vec<String> = rules
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("for:") {
                cut += 1;
                format!("{}for: 1s", &line[..line.len() - trimmed.len()])
            } else {
                line.to_owned()
            }
        })
        .collect();
    (lines.join("\n") + "\n", cut)
}

/// A Prometheus process on a loopback port, scraping the given targets;
/// killed on drop, its folder removed (kept, with its log printed, when the
/// test failed).
struct Prometheus {
    addr: SocketAddr,
    dir: PathBuf,
    child: std::process::Child,
}

impl Prometheus {
    fn start(binary: &Path, rules: &str, targets: &[SocketAddr]) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "leasehold-prometheus-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create the Prometheus folder");
        std::fs::write(dir.join("rules.yaml"), rules).expect("write the rules");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - rules.yaml\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("write the config");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("create the log");
        let child = std::process::Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        Prometheus {
            addr: format!("127.0.0.1:{port}").parse().expect("an address"),
            dir,
            child,
        }
    }

    /// GET `path` (already encoded): the status code and the body.
    async fn get(&self, path: &str) -> Result<(u16, String), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect to Prometheus: {e}"))?;
        // HTTP/1.0: the answer is neither chunked nor kept alive.
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr);
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("not an HTTP response: {response}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {head}"))?;
        Ok((status, body.to_owned()))
    }

    /// The `data` of a successful API answer.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let (status, body) = self.get(path).await?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("{path}: not JSON ({e}): {body}"))?;
        if status != 200 || answer["status"] != "success" {
            return Err(format!("{path}: {status} {body}"));
        }
        Ok(answer["data"].clone())
    }

    /// The instant vector of a PromQL query, as (labels, value).
    async fn query(&self, promql: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>, String> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(promql)))
            .await?;
        let result = data["result"]
            .as_array()
            .ok_or_else(|| format!("{promql}: not a vector: {data}"))?;
        Ok(result
            .iter()
            .map(|sample| {
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (labels(&sample["metric"]), value)
            })
            .collect())
    }

    /// Every pending or firing alert, as (name, labels, state).
    async fn alerts(&self) -> Result<Vec<Alert>, String> {
        let data = self.api("/api/v1/alerts").await?;
        Ok(data["alerts"]
            .as_array()
            .ok_or_else(|| format!("no alerts list: {data}"))?
            .iter()
            .map(|a| {
                let labels = labels(&a["labels"]);
                Alert {
                    name: labels.get("alertname").cloned().unwrap_or_default(),
                    state: a["state"].as_str().unwrap_or_default().to_owned(),
                    labels,
                }
            })
            .collect())
    }

    /// Every rule as (group, name, health, last error).
    async fn rules(&self) -> Result<Vec<[String; 4]>, String> {
        let data = self.api("/api/v1/rules").await?;
        let mut rules = Vec::new();
        for group in data["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                rules.push([
                    text(&group["name"]),
                    text(&rule["name"]),
                    text(&rule["health"]),
                    text(&rule["lastError"]),
                ]);
            }
        }
        Ok(rules)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "Prometheus' folder is kept: {}\nthe end of its log:\n{}",
                self.dir.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[derive(Debug)]
struct Alert {
    name: String,
    labels: BTreeMap<String, String>,
    state: String,
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// Percent-encoding of a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `probe` every 250 ms until it answers `Ok`, for at most `limit`;
/// panics with its last answer. For state that other processes own
/// (Prometheus' scrapes and evaluations): there is no event to await.
async fn poll<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {limit:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A sample summed over the brokers' own `/metrics`.
async fn summed(brokers: &[&BrokerProcess], series: &str) -> f64 {
    let mut total = 0.0;
    for broker in brokers {
        total += common::sample(&scrape(broker.metrics_addr).await, series);
    }
    total
}

/// The heartbeat streams open on `brokers`: Session streams (the clients'
/// default, `leasehold hold`'s among them) and KeepAlive streams.
async fn streams(brokers: &[&BrokerProcess]) -> f64 {
    summed(brokers, "leasehold_session_streams").await
        + summed(brokers, "leasehold_keepalive_streams").await
}

/// Every panel query of the Grafana dashboard, with its variables set to
/// this job and every instance.
fn dashboard_queries() -> Vec<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/leasehold-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("read the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push(
                    expr.replace("$__rate_interval", "1m")
                        .replace("$job", JOB)
                        .replace("$instance", ".*"),
                );
            }
        }
    }
    queries
}

/// Grants, renewals (TTL 600 ms, heartbeats every 200 ms, holds of 0 to
/// 400 ms), waits and releases by two clients on each broker, on two names,
/// until `stop`; the number of cycles.
fn healthy_traffic(
    brokers: &[String; 2],
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u32>> {
    (0..4)
        .map(|w| {
            let (url, stop) = (brokers[w % 2].clone(), Arc::clone(stop));
            tokio::spawn(async move {
                let client = Client::connect(url).await.expect("connect");
                let mut cycles = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let opts = AcquireOptions::new()
                        .ttl(Duration::from_millis(600))
                        .wait(Duration::from_secs(10))
                        .holder(format!("healthy-{w}"));
                    let lease = client
                        .acquire(&format!("healthy/{}", w % 2), opts)
                        .await
                        .expect("acquire under healthy traffic");
                    tokio::time::sleep(Duration::from_millis(u64::from(cycles % 5) * 100)).await;
                    assert!(!lease.is_lost(), "a lease was lost under healthy traffic");
                    lease.release().await.expect("release");
                    cycles += 1;
                }
                cycles
            })
        })
        .collect()
}

/// Waits until `alert` fires with these labels (each one present with its
/// value); returns the alerts then.
async fn fires(prometheus: &Prometheus, alert: &str, with: &[(&str, &str)]) -> Vec<Alert> {
    let what = format!("{alert} {with:?} firing");
    poll(Duration::from_secs(60), &what, || async {
        let alerts = prometheus.alerts().await?;
        let firing = alerts.iter().any(|a| {
            a.name == alert
                && a.state == "firing"
                && with
                    .iter()
                    .all(|(k, v)| a.labels.get(*k).map(String::as_str) == Some(*v))
        });
        if firing {
            Ok(alerts)
        } else {
            Err(format!("{alerts:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_evaluate_stay_quiet_when_healthy_and_fire_on_faults() {
    let Some(binary) = prometheus_binary() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if !ci && std::env::var("LEASEHOLD_SKIP_PROMETHEUS").is_ok_and(|v| v == "1") {
            eprintln!("SKIP: no prometheus binary (LEASEHOLD_SKIP_PROMETHEUS=1)");
            return;
        }
        panic!(
            "no `prometheus` binary on the PATH (or at $LEASEHOLD_PROMETHEUS): ./scripts/test \
             installs Debian's `prometheus` package (apt-get install prometheus); outside CI, \
             LEASEHOLD_SKIP_PROMETHEUS=1 skips this test"
        );
    };
    let started = Instant::now();
    let rules_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/rules.yaml");
    let real_rules = std::fs::read_to_string(&rules_path).expect("read rules.yaml");
    let (rules, cut) = shortened_rules(&real_rules);
    assert!(cut >= 5, "only {cut} `for:` lines found in rules.yaml");
    let rule_count = real_rules
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("- alert:") || l.starts_with("- record:")
        })
        .count();
    let group_count = real_rules
        .lines()
        .filter(|l| l.trim_start().starts_with("- name:"))
        .count();

    let mut redis = RedisServer::start();
    let mut a = BrokerProcess::start(&redis.url()).await;
    let mut b = BrokerProcess::start(&redis.url()).await;
    let prometheus = Prometheus::start(&binary, &rules, &[a.metrics_addr, b.metrics_addr]);
    let instance_a = a.metrics_addr.to_string();
    let instance_b = b.metrics_addr.to_string();

    // -- Healthy traffic ------------------------------------------------------
    let stop = Arc::new(AtomicBool::new(false));
    let workers = healthy_traffic(&[a.url(), b.url()], &stop);

    poll(Duration::from_secs(60), "both brokers scraped", || async {
        let up = prometheus
            .query(&format!("up{{job=\"{JOB}\"}} == 1"))
            .await?;
        (up.len() == 2).then_some(()).ok_or(format!("{up:?}"))
    })
    .await;
    // Every rule evaluated, none in error (an error is final: fail at once).
    poll(Duration::from_secs(60), "every rule evaluated", || async {
        let rules = prometheus.rules().await?;
        let broken: Vec<_> = rules.iter().filter(|r| r[2] == "err").collect();
        assert!(broken.is_empty(), "rules in error: {broken:?}");
        let groups: std::collections::BTreeSet<&str> =
            rules.iter().map(|r| r[0].as_str()).collect();
        if (rules.len(), groups.len()) != (rule_count, group_count) {
            return Err(format!(
                "{} rules in {} groups loaded, {rule_count} in {group_count} in rules.yaml: {rules:?}",
                rules.len(),
                groups.len()
            ));
        }
        let waiting: Vec<_> = rules.iter().filter(|r| r[2] != "ok").collect();
        waiting
            .is_empty()
            .then_some(())
            .ok_or(format!("{waiting:?}"))
    })
    .await;
    // The recordings see the traffic on both brokers: grants, and a finite
    // heartbeat p99 (renewals happened).
    poll(
        Duration::from_secs(60),
        "traffic recorded on both brokers",
        || async {
            let grants = prometheus
                .query(&format!(
                    "instance:lease_acquired:rate5m{{job=\"{JOB}\"}} > 0"
                ))
                .await?;
            let p99 = prometheus
                .query(&format!(
                    "instance_quantile:heartbeat_latency_seconds:histogram_quantile\
                 {{job=\"{JOB}\", quantile=\"0.99\"}} >= 0"
                ))
                .await?;
            (grants.len() == 2 && p99.len() == 2)
                .then_some(())
                .ok_or(format!("grants {grants:?}, heartbeat p99 {p99:?}"))
        },
    )
    .await;

    // Nothing pending or firing, round after round.
    let watch_until = Instant::now() + HEALTHY_WATCH;
    let mut rounds = 0;
    while Instant::now() < watch_until {
        let alerts = prometheus.alerts().await.expect("alerts");
        assert!(
            alerts.is_empty(),
            "alerts under healthy traffic: {alerts:#?}"
        );
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Every dashboard panel answers, with data.
    let queries = dashboard_queries();
    assert!(queries.len() >= 10, "dashboard queries: {queries:?}");
    for query in &queries {
        let result = prometheus
            .query(query)
            .await
            .unwrap_or_else(|e| panic!("dashboard query failed: {e}"));
        assert!(!result.is_empty(), "dashboard query without data: {query}");
    }
    // build_info and the process collector, as scraped.
    let info = prometheus
        .query(&format!("leasehold_build_info{{job=\"{JOB}\"}} == 1"))
        .await
        .expect("build_info");
    assert_eq!(info.len(), 2, "{info:?}");
    assert!(info
        .iter()
        .all(|(l, _)| l.get("version").map(String::as_str) == Some(env!("CARGO_PKG_VERSION"))));
    let rss = prometheus
        .query(&format!(
            "process_resident_memory_bytes{{job=\"{JOB}\"}} > 1e6"
        ))
        .await
        .expect("rss");
    assert_eq!(rss.len(), 2, "{rss:?}");

    stop.store(true, Ordering::Relaxed);
    let mut cycles = 0;
    for worker in workers {
        cycles += worker.await.expect("a healthy worker");
    }
    assert!(cycles >= 20, "only {cycles} healthy cycles");
    let healthy_done = started.elapsed();
    let alerts = prometheus.alerts().await.expect("alerts");
    assert!(
        alerts.is_empty(),
        "alerts under healthy traffic: {alerts:#?}"
    );

    // -- Killed holders -------------------------------------------------------
    // The workers' streams are gone before the victims' are counted.
    common::eventually(
        Duration::from_secs(30),
        "the workers' streams closed",
        || async { streams(&[&a, &b]).await == 0.0 },
    )
    .await;
    let beats_before = summed(&[&a, &b], "heartbeat_latency_seconds_count").await;
    let mut victims: Vec<tokio::process::Child> = (0..VICTIMS)
        .map(|i| {
            let broker = if i % 2 == 0 { &a } else { &b };
            tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
                .env("LEASEHOLD_BROKER", broker.url())
                .args(["hold", "--ttl", "1s", "--lock", &format!("victim/{i}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn leasehold hold")
        })
        .collect();
    // Each holds its lease over its stream and has renewed it (a broken
    // stream's leases are looked at only once renewed over it): 20 streams,
    // and three heartbeats' worth of renewals since.
    common::eventually(Duration::from_secs(30), "every victim renewing", || async {
        streams(&[&a, &b]).await == VICTIMS as f64
            && summed(&[&a, &b], "heartbeat_latency_seconds_count").await
                >= beats_before + 3.0 * VICTIMS as f64
    })
    .await;
    for victim in &mut victims {
        victim.start_kill().expect("SIGKILL");
        victim.wait().await.expect("reap");
    }
    common::eventually(
        Duration::from_secs(30),
        "every victim's loss counted",
        || async {
            summed(&[&a, &b], "lease_lost_total{reason=\"expired\"}").await == VICTIMS as f64
        },
    )
    .await;
    fires(
        &prometheus,
        "LeaseholdLeaseLossSpike",
        &[("job", JOB), ("reason", "expired")],
    )
    .await;
    let losses_done = started.elapsed();

    // -- Redis made evicting -----------------------------------------------------
    // A managed Redis's usual set-up: a memory limit with volatile-lru,
    // which evicts leases. The brokers refuse it (NOT_SERVING) and say so.
    let mut conn = redis.connection().await;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("100mb")
        .arg("maxmemory-policy")
        .arg("volatile-lru")
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET");
    fires(
        &prometheus,
        "LeaseholdStoreUnsafe",
        &[("job", JOB), ("setting", "maxmemory-policy")],
    )
    .await;
    let unsafe_done = started.elapsed();

    // -- Redis stopped ----------------------------------------------------------
    redis.stop();
    fires(
        &prometheus,
        "LeaseholdStoreDown",
        &[("instance", &instance_a)],
    )
    .await;
    let alerts = fires(
        &prometheus,
        "LeaseholdStoreDown",
        &[("instance", &instance_b)],
    )
    .await;
    let redis_done = started.elapsed();

    // -- A broker killed ----------------------------------------------------------
    a.kill();
    fires(
        &prometheus,
        "LeaseholdBrokerDown",
        &[("instance", &instance_a)],
    )
    .await;
    let broker_done = started.elapsed();
    // ... and the other: none is up.
    b.kill();
    fires(&prometheus, "LeaseholdAllBrokersDown", &[("job", JOB)]).await;
    let all_done = started.elapsed();

    // The rules still evaluate without error, with no target up and no store.
    let broken: Vec<_> = prometheus
        .rules()
        .await
        .expect("rules")
        .into_iter()
        .filter(|r| r[2] != "ok")
        .collect();
    assert!(broken.is_empty(), "rules not ok at the end: {broken:?}");

    let names: std::collections::BTreeSet<&str> = alerts.iter().map(|a| a.name.as_str()).collect();
    println!(
        "prometheus: {rule_count} rules; healthy: {cycles} cycles, {rounds} quiet rounds, \
         {} dashboard queries answered, done at {healthy_done:.1?}; {VICTIMS} killed holders \
         fired LeaseholdLeaseLossSpike at {losses_done:.1?}; an evicting Redis fired \
         LeaseholdStoreUnsafe at {unsafe_done:.1?}; Redis stopped fired \
         LeaseholdStoreDown at {redis_done:.1?} (alerts then: {names:?}); a killed broker fired \
         LeaseholdBrokerDown at {broker_done:.1?}, both LeaseholdAllBrokersDown at \
         {all_done:.1?}",
        queries.len()
    );
}
