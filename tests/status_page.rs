//! The status page of the HTTP gateway (`GET /status` on `--http-listen`:
//! server/src/service/gateway/status.html) in a real headless Chromium
//! (Debian's `chromium`, which scripts/test installs; without it these
//! tests fail and say so), driven over the DevTools protocol
//! (tests/harness/src/browser.rs), against a broker on Redis and on
//! PostgreSQL. The page asks the broker every second; every wait here is a
//! wait in the page for what it shows (a DOM condition re-checked at each
//! change), never a sleep. It checks that:
//!
//! - the page loads and shows the store as serving;
//! - a lock a client takes shows within a refresh, with its holder, its
//!   fence and its time left (counting down); a waiter shows as 1 waiting;
//!   a semaphore's permits, an election's leader and a name in its
//!   lock-delay show too; the filter box keeps the names with its prefix;
//!   on release the row goes to the waiter (its holder and fence), and on
//!   the waiter's release the row is gone;
//! - a revoked lease shows under recent losses with its reason;
//! - with `--auth-file`, the page asks for a token (again when one is
//!   refused), and once one is typed shows its tenant's locks and not another tenant's (an `admin` token:
//!   every tenant's); the token is kept in sessionStorage only, never in
//!   localStorage or the URL;
//! - the page logs no error (a script error, a Content-Security-Policy
//!   refusal) on the way.
//!
//! Each store's page, with its locks held, is kept as
//! `target/test-artifacts/status-page-<store>.png`; docs/images/status-page.png
//! is one of them.

use leasehold_testkit as common;

use std::{path::PathBuf, time::Duration};

use common::{
    acquire_req, browser::Browser, tenants::TenantTokens, Broker, PostgresServer, RedisServer,
};
use leasehold_client::Credentials;
use leasehold_server::proto::{
    AcquireRequest, CampaignRequest, Lease, ReleaseRequest, RevokeRequest,
};
use serde_json::json;

/// How soon a change in the store shows on the page: it asks every second,
/// so within a second of the change, plus the time of that refresh (a walk
/// of the listing and the status: milliseconds on loopback, more on a
/// loaded machine).
const LIVE: Duration = Duration::from_millis(1500);

/// How long a fresh broker may take to report its store serving (its first
/// health ping, every 100 ms in tests) and the page to show it.
const STARTING: Duration = Duration::from_secs(15);

/// The lock the tests watch, its holder, and the waiter that gets it next.
const LOCK: &str = "billing/ledger";
const HOLDER: &str = "invoice-worker-7";
const NEXT_HOLDER: &str = "invoice-worker-8";

/// A JavaScript string literal of `text` (quoted and escaped as JSON is).
fn js(text: &str) -> String {
    json!(text).to_string()
}

/// JavaScript: the text of cell `field` of the row of `lock`
/// (`tenant/name`), or null while there is no such row.
fn cell(lock: &str, field: &str) -> String {
    format!(
        "(document.querySelector({})?.textContent ?? null)",
        js(&format!(r##"[data-lock="{lock}"] [data-field="{field}"]"##))
    )
}

/// JavaScript: whether the row of `lock` is on the page.
fn row(lock: &str) -> String {
    format!(
        "document.querySelector({}) !== null",
        js(&format!(r##"[data-lock="{lock}"]"##))
    )
}

/// Where a store's screenshot is kept: `target/test-artifacts/`.
fn artifact(store: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-artifacts")
        .join(format!("status-page-{store}.png"))
}

/// A broker on `store` with the HTTP gateway on a free loopback port and
/// Revoke allowed (no auth file: every caller may revoke, and list every
/// tenant), and the page's URL.
async fn broker(
    store: &str,
    adjust: impl FnOnce(&mut leasehold_server::config::ServeConfig),
) -> (Broker, String) {
    let broker = Broker::start_with(store, |c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(c);
    })
    .await;
    let http = broker.http_addr.expect("the HTTP gateway's address");
    (broker, format!("http://{http}/status"))
}

/// Waits until the page shows the store as serving.
async fn serving(browser: &mut Browser) {
    browser
        .wait_for(
            r##"document.querySelector("#store-health")?.dataset.state === "serving"
               && document.querySelector("#store-health").textContent === "serving"
               && document.querySelector("#refreshed").dataset.state === "live""##,
            STARTING,
        )
        .await;
}

/// No script error, refused resource or Content-Security-Policy violation
/// in the page's log. Chromium logs every answer of 4xx as an error of
/// source `network`: the 401s that asked for a token are expected, and so
/// is the 404 of its own request for /favicon.ico (the page has none).
fn no_errors(browser: &Browser) {
    let expected = |line: &str| {
        line.starts_with("error (network)")
            && (line.contains("status of 401") || line.ends_with("/favicon.ico]"))
    };
    let errors: Vec<&String> = browser
        .log()
        .iter()
        .filter(|line| line.starts_with("error") && !expected(line))
        .collect();
    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
}

/// The page follows what a client does on `store` (`name`: redis,
/// postgres): see the file's comment.
async fn follows_the_locks(name: &str, store: &str, stop_store: impl FnOnce()) {
    let (broker, url) = broker(store, |c| c.enable_revoke = true).await;
    let mut client = broker.client().await;
    let mut browser = Browser::start().await;
    browser.open(&url).await;
    serving(&mut browser).await;

    // A lock, held: within a refresh, with its holder, fence and time left.
    let lease = client
        .acquire(acquire_req(LOCK, 30_000, HOLDER, 0))
        .await
        .expect("acquire")
        .into_inner()
        .lease
        .expect("a lease");
    let key = format!("@root/{LOCK}");
    browser
        .wait_for(
            &format!(
                "{} === {} && {} === {} && {} === 'held'",
                cell(&key, "holder"),
                js(HOLDER),
                cell(&key, "fence"),
                js(&lease.fence.to_string()),
                cell(&key, "state"),
            ),
            LIVE,
        )
        .await;
    assert_eq!(
        browser.evaluate(&cell(&key, "tenant")).await,
        json!("@root")
    );
    assert_eq!(browser.evaluate(&cell(&key, "ttl")).await, json!("30 s"));
    // Time left: whole seconds of the 30 s lease, counting down.
    let left = browser.evaluate(&cell(&key, "remaining")).await;
    let seconds = |text: &serde_json::Value| -> u64 {
        let text = text.as_str().unwrap_or_default();
        text.strip_suffix(" s")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("time left {text:?}, not whole seconds"))
    };
    let first = seconds(&left);
    assert!(
        (20..=30).contains(&first),
        "time left {left} of a 30 s lease"
    );
    browser
        .wait_for(
            &format!("parseInt({}) < {first}", cell(&key, "remaining")),
            LIVE,
        )
        .await;

    // A caller waiting for it.
    let waiter = {
        let mut client = broker.client().await;
        tokio::spawn(async move {
            client
                .acquire(acquire_req(LOCK, 30_000, NEXT_HOLDER, 20_000))
                .await
                .expect("the waiter's acquire")
                .into_inner()
                .lease
                .expect("a lease for the waiter")
        })
    };
    browser
        .wait_for(&format!("{} === '1 waiting'", cell(&key, "waiters")), LIVE)
        .await;

    // A semaphore, an election, and a lease revoked (a loss, and its
    // lock-delay).
    for holder in ["export-1", "export-2"] {
        client
            .acquire(AcquireRequest {
                limit: 4,
                ..acquire_req("exports/slots", 60_000, holder, 0)
            })
            .await
            .expect("a permit");
    }
    let leader = client
        .campaign(CampaignRequest {
            election: "scheduler/leader".into(),
            value: "scheduler-a:8080".into(),
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .expect("campaign")
        .into_inner()
        .lease
        .expect("leadership");
    client
        .acquire(AcquireRequest {
            lock_delay_ms: 30_000,
            ..acquire_req("reports/nightly", 60_000, "report-runner", 0)
        })
        .await
        .expect("acquire reports/nightly");
    client
        .revoke(RevokeRequest {
            name: "reports/nightly".into(),
            tenant: String::new(),
        })
        .await
        .expect("revoke");
    browser
        .wait_for(
            &format!(
                "{} === 'semaphore: 2 permits held' && {} === {} && {} === {} \
                 && {} === 'in lock-delay' \
                 && document.querySelector('[data-loss=\"@root/reports/nightly\"] [data-field=reason]')\
                        ?.textContent.startsWith('revoked')",
                cell("@root/exports/slots", "state"),
                cell("@root/scheduler/leader", "holder"),
                js("scheduler-a:8080"),
                cell("@root/scheduler/leader", "fence"),
                js(&leader.fence.to_string()),
                cell("@root/reports/nightly", "state"),
            ),
            LIVE,
        )
        .await;
    assert!(
        browser
            .evaluate(&cell("@root/reports/nightly", "remaining"))
            .await
            .as_str()
            .is_some_and(|t| t.ends_with(" of lock-delay")),
        "the lock-delay's time left"
    );
    browser.screenshot(&artifact(name)).await;

    // The filter: a name prefix, asked of the broker.
    filter(&mut browser, "exports/").await;
    browser
        .wait_for(
            &format!(
                "{} && document.querySelectorAll('[data-lock]').length === 1",
                row("@root/exports/slots")
            ),
            LIVE,
        )
        .await;
    filter(&mut browser, "").await;
    browser.wait_for(&row(&key), LIVE).await;

    // Released: the waiter holds it (its holder, the next fence), then,
    // released too, the row is gone.
    release(&mut client, &lease).await;
    let next = waiter.await.expect("the waiter's task");
    assert!(next.fence > lease.fence);
    browser
        .wait_for(
            &format!(
                "{} === {} && {} === {} && {} === 'none'",
                cell(&key, "holder"),
                js(NEXT_HOLDER),
                cell(&key, "fence"),
                js(&next.fence.to_string()),
                cell(&key, "waiters"),
            ),
            LIVE,
        )
        .await;
    release(&mut client, &next).await;
    browser.wait_for(&format!("!({})", row(&key)), LIVE).await;
    no_errors(&browser);

    // The store gone: the broker's message, the last data kept and marked
    // stale, the store not serving.
    stop_store();
    browser
        .wait_for(
            &format!(
                r##"document.querySelector("#refreshed").dataset.state === "stale"
                   && document.querySelector("#refreshed").textContent.startsWith("STALE")
                   && !document.querySelector("#alert").hidden
                   && document.querySelector("#alert").textContent.length > 0
                   && {}"##,
                row("@root/scheduler/leader")
            ),
            STARTING,
        )
        .await;
    browser
        .wait_for(
            r##"document.querySelector("#store-health").dataset.state === "not-serving"
               && document.querySelector("#store-health").textContent === "not serving""##,
            STARTING,
        )
        .await;
}

async fn release(
    client: &mut leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient<
        tonic::transport::Channel,
    >,
    lease: &Lease,
) {
    client
        .release(ReleaseRequest {
            name: LOCK.into(),
            owner_token: lease.owner_token.clone(),
        })
        .await
        .expect("release");
}

/// With `--auth-file`, the page asks for a token and shows what it may
/// see: see the file's comment.
async fn asks_for_a_token(store: &str) {
    let TenantTokens {
        payments,
        billing,
        ops,
        file,
    } = TenantTokens::new("status-page");
    let (broker, url) = broker(store, |c| c.auth_file = Some(file)).await;
    for (token, holder) in [(&payments, "payments-app"), (&billing, "billing-app")] {
        Credentials::bearer(Some(token))
            .unwrap()
            .client(broker.channel().await)
            .acquire(acquire_req("ledger", 60_000, holder, 0))
            .await
            .expect("acquire ledger");
    }

    let mut browser = Browser::start().await;
    browser.open(&url).await;
    // Asked for a token, and shown nothing without one.
    browser
        .wait_for(
            r##"!document.querySelector("#auth").hidden
               && document.activeElement === document.querySelector("#token")
               && document.querySelectorAll("[data-lock]").length === 0"##,
            STARTING,
        )
        .await;

    // A token the broker does not know: refused, and asked again.
    sign_in(&mut browser, "not-a-token").await;
    browser
        .wait_for(
            r##"!document.querySelector("#auth").hidden
               && document.querySelector("#alert").textContent.startsWith("The broker refused the token")"##,
            LIVE,
        )
        .await;

    // Payments' token: payments' ledger, not billing's.
    sign_in(&mut browser, &payments).await;
    browser
        .wait_for(
            &format!(
                "{} === 'payments-app' && document.querySelector('#scope').textContent === 'of tenant payments' \
                 && document.querySelector('#auth').hidden",
                cell("payments/ledger", "holder")
            ),
            LIVE,
        )
        .await;
    serving(&mut browser).await;
    assert_eq!(
        browser
            .evaluate("document.querySelectorAll('[data-lock]').length")
            .await,
        json!(1),
        "payments sees only its own lock"
    );
    assert_eq!(browser.evaluate(&row("billing/ledger")).await, json!(false));
    // Kept in this tab's sessionStorage only.
    let kept = browser
        .evaluate(&format!(
            "[Object.values(sessionStorage).includes({t}), localStorage.length, \
              location.href.includes({t}), document.cookie]",
            t = js(&payments)
        ))
        .await;
    assert_eq!(kept, json!([true, 0, false, ""]), "where the token is kept");

    // Forgotten, and an administrator's token: every tenant's locks.
    browser
        .evaluate("document.querySelector('#forget-token').click(), true")
        .await;
    browser
        .wait_for(r##"!document.querySelector("#auth").hidden"##, LIVE)
        .await;
    sign_in(&mut browser, &ops).await;
    browser
        .wait_for(
            &format!(
                "{} === 'payments-app' && {} === 'billing-app' && {} === 'billing' \
                 && document.querySelector('#scope').textContent === 'of every tenant'",
                cell("payments/ledger", "holder"),
                cell("billing/ledger", "holder"),
                cell("billing/ledger", "tenant"),
            ),
            LIVE,
        )
        .await;
    no_errors(&browser);
}

/// Types `prefix` in the page's filter box.
async fn filter(browser: &mut Browser, prefix: &str) {
    browser
        .evaluate(&format!(
            "(() => {{ const box = document.querySelector('#filter'); box.value = {}; \
               box.dispatchEvent(new Event('input', {{ bubbles: true }})); return true; }})()",
            js(prefix)
        ))
        .await;
}

/// Types `token` in the page's token field and submits it.
async fn sign_in(browser: &mut Browser, token: &str) {
    browser
        .evaluate(&format!(
            "(() => {{ document.querySelector('#token').value = {}; \
               document.querySelector('#token-form').requestSubmit(); return true; }})()",
            js(token)
        ))
        .await;
}

#[tokio::test]
async fn follows_the_locks_on_redis() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    follows_the_locks("redis", &url, || redis.stop()).await;
}

#[tokio::test]
async fn follows_the_locks_on_postgres() {
    let mut postgres = PostgresServer::start();
    let url = postgres.url();
    follows_the_locks("postgres", &url, || postgres.stop()).await;
}

#[tokio::test]
async fn asks_for_a_token_on_redis() {
    let redis = RedisServer::start();
    asks_for_a_token(&redis.url()).await;
}

#[tokio::test]
async fn asks_for_a_token_on_postgres() {
    let postgres = PostgresServer::start();
    asks_for_a_token(&postgres.url()).await;
}
