//! What an operator sees of the fleet (issue 32): `leasehold list` (a table
//! and `-o json`) over the List RPC, its tenant scoping and its refusals,
//! and the census gauges (`leasehold_store_*`), on a broker over a real
//! redis-server and a real PostgreSQL.

use leasehold_testkit as common;

use std::{path::PathBuf, time::Duration};

use common::{
    eventually, postgres::PostgresServer, sample, scrape, tenants::TenantTokens, Broker,
    RedisServer,
};
use leasehold_client::{AcquireOptions, Client, ClientOptions, Credentials};
use tokio::process::Command;

/// The stores the operators' views are tested on, each with its server.
enum Server {
    Redis(RedisServer),
    Postgres(PostgresServer),
}

impl Server {
    fn start(store: &str) -> Server {
        match store {
            "redis" => Server::Redis(RedisServer::start()),
            "postgres" => Server::Postgres(PostgresServer::start()),
            other => panic!("no store {other}"),
        }
    }

    fn url(&self) -> String {
        match self {
            Server::Redis(redis) => redis.url(),
            Server::Postgres(postgres) => postgres.url(),
        }
    }
}

/// `leasehold list ARGS` against `broker`, with `token` as its credential:
/// its exit code, stdout and stderr.
async fn list(broker: &Broker, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .arg("list")
        .args(args)
        .env("LEASEHOLD_BROKER", broker.url())
        .env_remove("LEASEHOLD_AUTH_TOKEN")
        .kill_on_drop(true);
    if let Some(token) = token {
        command.env("LEASEHOLD_AUTH_TOKEN", token);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("list finished within 30 s")
        .expect("run leasehold list");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The JSON lines of `list -o json`.
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A lease on `name` by `holder` (kept alive by the client).
async fn take(client: &Client, name: &str, holder: &str) -> leasehold_client::Lease {
    client
        .acquire(
            name,
            AcquireOptions::new()
                .ttl(Duration::from_secs(30))
                .holder(holder),
        )
        .await
        .unwrap_or_else(|e| panic!("acquire {name}: {e}"))
}

/// `list` shows the held locks, semaphores and wait lines under a prefix,
/// with holders, fences and time left, as a table and as JSON lines whose
/// values are the leases' own; and nothing outside the prefix, nor a
/// released lock.
async fn lists_what_is_held(store: &str) {
    let server = Server::start(store);
    let broker = Broker::start(&server.url()).await;
    let client = Client::connect(broker.url()).await.unwrap();
    let nightly = take(&client, "jobs/nightly", "worker-1").await;
    let hourly = take(&client, "jobs/hourly", "worker-2").await;
    let gone = take(&client, "jobs/gone", "worker-3").await;
    gone.release().await.unwrap();
    let _other = take(&client, "other/x", "worker-4").await;
    let semaphore = AcquireOptions::new().ttl(Duration::from_secs(30)).limit(3);
    let _p1 = client
        .acquire("jobs/pool", semaphore.clone())
        .await
        .unwrap();
    let _p2 = client.acquire("jobs/pool", semaphore).await.unwrap();
    // A waiter in the nightly job's line, until the test ends.
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire(
                    "jobs/nightly",
                    AcquireOptions::new().wait(Duration::from_secs(60)),
                )
                .await
        })
    };
    eventually(Duration::from_secs(10), "the waiter in line", || async {
        client.describe("jobs/nightly").await.unwrap().waiters == 1
    })
    .await;

    let (code, stdout, stderr) = list(&broker, None, &["jobs/", "-o", "json"]).await;
    assert_eq!(code, 0, "{stderr}");
    let rows = json_lines(&stdout);
    let names: Vec<&str> = rows.iter().map(|r| r["lock"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["jobs/hourly", "jobs/nightly", "jobs/pool"],
        "{stdout}"
    );
    let row = |name: &str| rows.iter().find(|r| r["lock"] == name).unwrap();
    assert_eq!(row("jobs/nightly")["holder"], "worker-1");
    assert_eq!(row("jobs/nightly")["fence"], nightly.fence());
    assert_eq!(row("jobs/nightly")["waiters"], 1);
    assert_eq!(row("jobs/nightly")["tenant"], "@root");
    assert_eq!(row("jobs/hourly")["fence"], hourly.fence());
    assert_eq!(row("jobs/hourly")["ttl_ms"], 30_000);
    let left = row("jobs/hourly")["remaining_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 30_000, "{left}");
    assert_eq!(row("jobs/pool")["held"], false);
    assert_eq!(row("jobs/pool")["permits_held"], 2);

    let (code, table, stderr) = list(&broker, None, &["jobs/"]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATE", "HOLDER", "FENCE", "LEFT", "TTL", "WAITERS"]
    );
    let nightly_row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        nightly_row[..4],
        [
            "jobs/nightly",
            "held",
            "worker-1",
            &nightly.fence().to_string()
        ]
    );
    assert_eq!(nightly_row.last(), Some(&"1"), "one waiter: {table}");
    assert!(
        lines[3].starts_with("jobs/pool") && lines[3].contains("2 permits"),
        "{table}"
    );

    // Every name, in small pages: the walk goes on across them.
    let (code, stdout, stderr) = list(&broker, None, &["--page-size", "1", "-o", "json"]).await;
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<String> = json_lines(&stdout)
        .iter()
        .map(|r| r["lock"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        ["jobs/hourly", "jobs/nightly", "jobs/pool", "other/x"]
    );

    // --limit stops early, and says so.
    let (code, stdout, stderr) = list(&broker, None, &["--limit", "2"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(stderr.contains("--limit"), "{stderr}");
    waiter.abort();
}

#[tokio::test]
async fn lists_what_is_held_on_redis() {
    lists_what_is_held("redis").await;
}

#[tokio::test]
async fn lists_what_is_held_on_postgres() {
    lists_what_is_held("postgres").await;
}

/// Refusals name the command's own words: a bad prefix, a page too large,
/// a page token no listing gave.
#[tokio::test]
async fn list_refusals_name_the_flag_to_change() {
    let broker = Broker::start("memory").await;
    let (code, _, stderr) = list(&broker, None, &["jobs nightly"]).await;
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.starts_with("leasehold: PREFIX: the name prefix contains ' '"),
        "{stderr}"
    );
    let (code, _, stderr) = list(&broker, None, &["--page-size", "5000"]).await;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.starts_with("leasehold: --page-size:"), "{stderr}");
    assert!(stderr.contains("at most 1000"), "{stderr}");

    let client = Client::connect(broker.url()).await.unwrap();
    let refused = client
        .list_page("", "", 10, "{not-a-token}")
        .await
        .unwrap_err();
    let refusal = refused.refusal().expect("a structured refusal");
    assert_eq!(
        (refusal.reason(), refusal.get("argument")),
        ("BAD_ARGUMENT", Some("page_token"))
    );
}

/// A client of `brokers` (the first that answers, then the next) with
/// `token`.
async fn client_of(brokers: &[&Broker], token: &str) -> Client {
    let options = ClientOptions {
        credentials: Credentials::bearer(Some(token)).unwrap(),
        ..ClientOptions::default()
    };
    Client::connect_any_with(brokers.iter().map(|b| b.url()), &options)
        .await
        .unwrap()
}

async fn client_as(broker: &Broker, token: &str) -> Client {
    let options = ClientOptions {
        credentials: Credentials::bearer(Some(token)).unwrap(),
        ..ClientOptions::default()
    };
    Client::connect_any_with([broker.url()], &options)
        .await
        .unwrap()
}

/// A tenant lists its own locks only; another tenant's, or every tenant's,
/// need the admin permission, which lists them with their tenants.
async fn listing_is_scoped_by_tenant(store: &str) {
    let server = Server::start(store);
    let tenants = TenantTokens::new(store);
    let file = tenants.file.clone();
    let broker = Broker::start_with(&server.url(), move |c| c.auth_file = Some(file)).await;
    let payments = client_as(&broker, &tenants.payments).await;
    let billing = client_as(&broker, &tenants.billing).await;
    let _a = take(&payments, "jobs/settle", "p").await;
    let _b = take(&billing, "jobs/invoice", "b").await;

    let names = |stdout: &str| -> Vec<(String, String)> {
        json_lines(stdout)
            .iter()
            .map(|r| {
                (
                    r["tenant"].as_str().unwrap().to_owned(),
                    r["lock"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let (code, stdout, stderr) = list(&broker, Some(&tenants.payments), &["-o", "json"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        names(&stdout),
        [("payments".to_owned(), "jobs/settle".to_owned())]
    );
    let (code, _, stderr) = list(&broker, Some(&tenants.payments), &["--tenant", "billing"]).await;
    assert_eq!(code, 77, "{stderr}");
    assert!(stderr.contains("admin"), "{stderr}");
    let (code, _, stderr) = list(&broker, Some(&tenants.payments), &["--tenant", "*"]).await;
    assert_eq!(code, 77, "{stderr}");

    let (code, stdout, stderr) = list(
        &broker,
        Some(&tenants.ops),
        &["--tenant", "billing", "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        names(&stdout),
        [("billing".to_owned(), "jobs/invoice".to_owned())]
    );
    let (code, stdout, stderr) = list(
        &broker,
        Some(&tenants.ops),
        &["--tenant", "*", "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        names(&stdout),
        [
            ("billing".to_owned(), "jobs/invoice".to_owned()),
            ("payments".to_owned(), "jobs/settle".to_owned())
        ]
    );
    let (code, table, stderr) = list(&broker, Some(&tenants.ops), &["--tenant", "*"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(table.starts_with("TENANT"), "{table}");
}

#[tokio::test]
async fn listing_is_scoped_by_tenant_on_redis() {
    listing_is_scoped_by_tenant("redis").await;
}

#[tokio::test]
async fn listing_is_scoped_by_tenant_on_postgres() {
    listing_is_scoped_by_tenant("postgres").await;
}

/// The value of `series` in a scrape of `broker`, 0 when absent.
async fn gauge(broker: &Broker, series: &str) -> f64 {
    let text = scrape(broker.metrics_addr).await;
    if text
        .lines()
        .any(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
    {
        sample(&text, series)
    } else {
        0.0
    }
}

/// The highest value of `series` on `brokers` (a dashboard's `max`; 0
/// where a broker does not serve it).
async fn fleet(brokers: &[&Broker], series: &str) -> f64 {
    let mut highest = 0.0_f64;
    for broker in brokers {
        highest = highest.max(gauge(broker, series).await);
    }
    highest
}

/// Waits for the census of `brokers` to say `want` of `series`.
async fn census_says(brokers: &[&Broker], series: &str, want: f64) {
    eventually(
        Duration::from_secs(15),
        &format!("{series} = {want}"),
        || async { fleet(brokers, series).await == want },
    )
    .await;
}

/// Whether `broker` takes the census now (and so serves its counts).
async fn takes_the_census(broker: &Broker) -> bool {
    gauge(broker, "leasehold_census_taker").await == 1.0
}

/// The census gauges count exactly what the store holds, by tenant: leases,
/// permits and waiters taken through two brokers (the census counts the
/// fleet, not one broker's calls), and back to 0 when they end; a tenant
/// that holds nothing any more loses its series. One broker takes the
/// census and serves the counts, the other none; when the taker stops,
/// the other takes over.
async fn the_census_counts_what_the_store_holds(store: &str) {
    let server = Server::start(store);
    let tenants = TenantTokens::new(&format!("census-{store}"));
    let census = |c: &mut leasehold_server::config::ServeConfig, file: PathBuf| {
        c.auth_file = Some(file);
        c.census_interval = Duration::from_millis(100);
    };
    let file = tenants.file.clone();
    let one = Broker::start_with(&server.url(), |c| census(c, file)).await;
    let file = tenants.file.clone();
    let two = Broker::start_with(&server.url(), |c| census(c, file)).await;
    // Clients of both brokers, which carry on through the one left when
    // the other stops.
    let payments = client_of(&[&one, &two], &tenants.payments).await;
    let billing = client_of(&[&two, &one], &tenants.billing).await;

    let a = take(&payments, "jobs/a", "p").await;
    let b = take(&payments, "jobs/b", "p").await;
    let c = take(&billing, "jobs/c", "b").await;
    let semaphore = AcquireOptions::new().ttl(Duration::from_secs(30)).limit(5);
    let p1 = billing.acquire("pool", semaphore.clone()).await.unwrap();
    let p2 = billing.acquire("pool", semaphore.clone()).await.unwrap();
    let p3 = billing.acquire("pool", semaphore).await.unwrap();
    let waiter = {
        let payments = payments.clone();
        tokio::spawn(async move {
            payments
                .acquire(
                    "jobs/a",
                    AcquireOptions::new().wait(Duration::from_secs(60)),
                )
                .await
        })
    };
    let both = [&one, &two];
    census_says(
        &both,
        r#"leasehold_store_leases_held{tenant="payments"}"#,
        2.0,
    )
    .await;
    census_says(
        &both,
        r#"leasehold_store_leases_held{tenant="billing"}"#,
        1.0,
    )
    .await;
    census_says(
        &both,
        r#"leasehold_store_permits_held{tenant="billing"}"#,
        3.0,
    )
    .await;
    census_says(&both, r#"leasehold_store_waiters{tenant="payments"}"#, 1.0).await;
    census_says(&both, "leasehold_census_complete", 1.0).await;
    // Counted, so these are the census's zeros, not absent series.
    assert_eq!(
        fleet(&both, r#"leasehold_store_permits_held{tenant="payments"}"#).await,
        0.0
    );
    assert_eq!(
        fleet(&both, r#"leasehold_store_leases_held{tenant="@root"}"#).await,
        0.0
    );

    // One taker; the other serves no counts. (The taker's lease is the
    // broker's own: no listing shows it.)
    let (taker, other) = if takes_the_census(&one).await {
        (one, two)
    } else {
        (two, one)
    };
    assert!(takes_the_census(&taker).await);
    assert!(!takes_the_census(&other).await);
    let text = scrape(other.metrics_addr).await;
    assert!(!text.contains("leasehold_store_leases_held{"), "{text}");
    assert_eq!(sample(&text, "leasehold_census_timestamp_seconds"), 0.0);
    let text = scrape(taker.metrics_addr).await;
    assert!(
        sample(&text, "leasehold_census_timestamp_seconds") > 1.7e9,
        "{text}"
    );

    // The taker stops (and gives its lease up): the other takes over.
    waiter.abort();
    for lease in [a, b] {
        lease.release().await.unwrap();
    }
    taker.stop().await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the other broker takes the census",
        || async { takes_the_census(&other).await },
    )
    .await;
    let others = [&other];
    census_says(
        &others,
        r#"leasehold_store_leases_held{tenant="payments"}"#,
        0.0,
    )
    .await;
    census_says(
        &others,
        r#"leasehold_store_leases_held{tenant="billing"}"#,
        1.0,
    )
    .await;
    for lease in [c, p1, p2, p3] {
        lease.release().await.unwrap();
    }
    // Nothing held by billing: its series are gone, not left at their last
    // value.
    eventually(
        Duration::from_secs(15),
        "billing's series dropped",
        || async {
            !scrape(other.metrics_addr)
                .await
                .contains(r#"tenant="billing""#)
        },
    )
    .await;
}

#[tokio::test]
async fn the_census_counts_what_the_store_holds_on_redis() {
    the_census_counts_what_the_store_holds("redis").await;
}

#[tokio::test]
async fn the_census_counts_what_the_store_holds_on_postgres() {
    the_census_counts_what_the_store_holds("postgres").await;
}

/// A census that meets more names than --census-max-names stops there and
/// says its counts are partial. (The census taker's own lease is one of
/// the names it meets: 4 names are the lease and 3 locks.)
#[tokio::test]
async fn a_census_past_its_cap_says_it_is_partial() {
    let broker = Broker::start_with("memory", |c| {
        c.census_interval = Duration::from_millis(100);
        c.census_max_names = 4;
    })
    .await;
    let client = Client::connect(broker.url()).await.unwrap();
    let mut leases = Vec::new();
    for i in 0..5 {
        leases.push(take(&client, &format!("n/{i}"), "h").await);
    }
    // Counted first (a census ran), then read: the gauge starts at 0.
    census_says(
        &[&broker],
        r#"leasehold_store_leases_held{tenant="@root"}"#,
        3.0,
    )
    .await;
    assert_eq!(gauge(&broker, "leasehold_census_complete").await, 0.0);
    for lease in leases.drain(2..) {
        lease.release().await.unwrap();
    }
    census_says(
        &[&broker],
        r#"leasehold_store_leases_held{tenant="@root"}"#,
        2.0,
    )
    .await;
    census_says(&[&broker], "leasehold_census_complete", 1.0).await;
}

/// A census capped just above the number of names held counts them all,
/// and says it is complete, on Redis, whose pages hold fewer names than
/// they look at (SCAN counts keys): the cap is on names counted, not on
/// pages times their size. (At the cap itself the census cannot tell
/// whether more would follow, and says it is partial.)
#[tokio::test]
async fn a_census_capped_at_the_names_held_counts_them_all_on_redis() {
    const NAMES: usize = 1_500;
    let server = Server::start("redis");
    // The names are taken through a broker that takes no census, then
    // counted by one that does: its first census (at its start) meets
    // them all, and the next may come long after (a walk's nine times
    // over) on a loaded machine.
    let filler = Broker::start_with(&server.url(), |c| c.census_interval = Duration::ZERO).await;
    let mut grpc = filler.client().await;
    for i in 0..NAMES {
        common::must_acquire(&mut grpc, &format!("many/{i:04}"), 120_000).await;
    }
    let broker = Broker::start_with(&server.url(), |c| {
        c.census_interval = Duration::from_millis(200);
        c.census_max_names = NAMES + 1;
    })
    .await;
    census_says(
        &[&broker],
        r#"leasehold_store_leases_held{tenant="@root"}"#,
        NAMES as f64,
    )
    .await;
    assert_eq!(gauge(&broker, "leasehold_census_complete").await, 1.0);
}

/// A census taker's grant whose answer was lost (the call timed out after
/// Redis applied it) is the broker's still: its next round renews that
/// very lease and takes the census, instead of leaving an orphan that
/// holds every replica's census off until it expires.
#[tokio::test]
async fn a_taker_grant_whose_answer_was_lost_is_renewed_not_orphaned() {
    use leasehold_server::store::read_record;
    let redis = RedisServer::start();
    let key = "test:{@census}";
    let census = |c: &mut leasehold_server::config::ServeConfig| {
        // Long enough that the orphan would outlive the test (its TTL is
        // three intervals), short enough for the rounds to come quickly.
        c.census_interval = Duration::from_secs(2);
        c.store_timeout = Duration::from_millis(500);
    };
    let first = Broker::start_with(&redis.url(), census).await;
    eventually(
        Duration::from_secs(15),
        "the first broker takes the census",
        || async { takes_the_census(&first).await },
    )
    .await;
    let proxy = common::proxy::Proxy::start(([127, 0, 0, 1], redis.port()).into()).await;
    let second = Broker::start_with(&format!("redis://{}", proxy.addr()), census).await;
    // Judged by its first ping (store up), and not the taker.
    census_says(&[&second], "leasehold_store_up", 1.0).await;
    assert!(!takes_the_census(&second).await);

    // The second broker's answers are lost from now on; the first gives
    // the taker's lease up, and the second's next round takes it in Redis
    // without hearing so.
    proxy.hold_answers();
    first.stop().await.unwrap();
    let mut conn = redis.connection().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let granted = loop {
        if let Some(record) = read_record(&mut conn, key).await.unwrap() {
            break record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no grant of the second broker in Redis"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Past the store timeout, the grant's call failed in the broker; then
    // the answers flow again.
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.pass();

    // The next round renews the lease it was granted: the same fence, the
    // same owner, well before that lease (6 s) could have expired.
    eventually(
        Duration::from_secs(5),
        "the second broker takes the census",
        || async { takes_the_census(&second).await },
    )
    .await;
    let held = read_record(&mut conn, key)
        .await
        .unwrap()
        .expect("the taker's lease");
    assert_eq!((held.fence, &held.owner), (granted.fence, &granted.owner));
}
