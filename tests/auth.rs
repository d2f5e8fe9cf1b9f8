//! Authentication, tenants and permissions (issue 8, point 2): a broker with
//! an `--auth-file` admits calls by bearer token or client certificate,
//! keeps each tenant's lock names apart (no name and no owner token of one
//! tenant reaches another's lock), and lets only `admin` credentials revoke
//! or look into other tenants. Against a real Redis where names meet keys.

use leasehold_testkit as common;

use std::{path::PathBuf, time::Duration};

use common::{
    acquire_req,
    certs::{scratch, write_server, Ca},
    eventually,
    history::{self, Grant},
    sample, scrape, Broker, BrokerProcess, RedisServer,
};
use leasehold_client::{Broker as Grpc, Credentials};
use leasehold_server::{
    auth::{generate_token, token_credential},
    proto::{
        lease_status, DescribeRequest, KeepAliveRequest, Lease, LeaseRef, ObserveRequest,
        ReleaseRequest, RenewRequest, RevokeRequest,
    },
};
use tonic::{
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
    Code,
};

/// Tokens for three tenants: payments and billing (`use`), ops (`admin`
/// only), written into an auth file.
struct Tokens {
    payments: String,
    billing: String,
    ops: String,
    file: PathBuf,
}

impl Tokens {
    fn new(test: &str, extra: &str) -> Self {
        let (payments, billing, ops) = (
            generate_token().unwrap(),
            generate_token().unwrap(),
            generate_token().unwrap(),
        );
        let file = scratch(test).join("auth");
        std::fs::write(
            &file,
            format!(
                "# tenant permissions credential\n\
                 payments use {}\nbilling use {}\nops admin {}\n{extra}",
                token_credential(&payments),
                token_credential(&billing),
                token_credential(&ops),
            ),
        )
        .unwrap();
        Tokens {
            payments,
            billing,
            ops,
            file,
        }
    }
}

async fn broker(store: &str, tokens: &Tokens) -> Broker {
    let file = tokens.file.clone();
    Broker::start_with(store, move |c| c.auth_file = Some(file)).await
}

/// A client of `broker` sending `token` (none for `None`).
async fn as_(broker: &Broker, token: Option<&str>) -> Grpc {
    Credentials::bearer(token)
        .unwrap()
        .client(broker.channel().await)
}

async fn take(client: &mut Grpc, name: &str) -> Lease {
    client
        .acquire(acquire_req(name, 30_000, "h", 0))
        .await
        .unwrap_or_else(|s| panic!("acquire {name}: {s:?}"))
        .into_inner()
        .lease
        .unwrap()
}

fn describe(name: &str) -> DescribeRequest {
    DescribeRequest {
        name: name.into(),
        ..Default::default()
    }
}

/// Tenant A cannot describe, renew, release, keep alive or revoke tenant B's
/// lock, not even with B's owner token, and the same name is two locks.
#[tokio::test]
async fn tenants_never_reach_each_others_locks() {
    let redis = RedisServer::start();
    let tokens = Tokens::new("isolation", "");
    let broker = broker(&redis.url(), &tokens).await;
    let mut payments = as_(&broker, Some(&tokens.payments)).await;
    let mut billing = as_(&broker, Some(&tokens.billing)).await;

    let theirs = take(&mut payments, "ledger").await;
    // The same name is another lock in billing's namespace: free, and
    // granted.
    let d = billing
        .describe(describe("ledger"))
        .await
        .unwrap()
        .into_inner();
    assert!(!d.held, "billing sees payments' lock: {d:?}");
    let ours = take(&mut billing, "ledger").await;
    assert_ne!(ours.owner_token, theirs.owner_token);

    // Even with payments' owner token, billing reaches only its own lock.
    let renew = billing
        .renew(RenewRequest {
            name: "ledger".into(),
            owner_token: theirs.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(renew.code(), Code::FailedPrecondition, "{renew:?}");
    billing
        .release(ReleaseRequest {
            name: "ledger".into(),
            owner_token: ours.owner_token.clone(),
        })
        .await
        .unwrap();
    for code in [
        billing
            .renew(RenewRequest {
                name: "ledger".into(),
                owner_token: theirs.owner_token.clone(),
                ttl_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap_err()
            .code(),
        billing
            .release(ReleaseRequest {
                name: "ledger".into(),
                owner_token: theirs.owner_token.clone(),
            })
            .await
            .unwrap_err()
            .code(),
    ] {
        assert_eq!(code, Code::NotFound);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(KeepAliveRequest {
        seq: 1,
        leases: vec![LeaseRef {
            name: "ledger".into(),
            owner_token: theirs.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut answers = billing
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.leases[0].state(), lease_status::State::Lost);
    // Names cannot spell another namespace.
    let forged = billing
        .describe(describe("payments|ledger"))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::InvalidArgument, "{forged:?}");
    // A `use` credential may not revoke, nor look into another tenant.
    let revoke = billing
        .revoke(RevokeRequest {
            name: "ledger".into(),
            tenant: "payments".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(revoke.code(), Code::PermissionDenied, "{revoke:?}");
    let peek = billing
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "payments".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(peek.code(), Code::PermissionDenied, "{peek:?}");

    // Payments' lease came through all of it untouched.
    let d = payments
        .describe(describe("ledger"))
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == theirs.fence, "{d:?}");
    payments
        .renew(RenewRequest {
            name: "ledger".into(),
            owner_token: theirs.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("payments still holds its lease");
}

/// Without a credential the broker knows, every call is UNAUTHENTICATED
/// (streams too), with a message saying what to send and never echoing what
/// was sent; health stays open, and refusals are counted.
#[tokio::test]
async fn calls_without_a_known_credential_are_unauthenticated() {
    let tokens = Tokens::new("unauthenticated", "");
    let broker = broker("memory", &tokens).await;
    let mut anonymous = as_(&broker, None).await;
    let status = anonymous.describe(describe("x")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        status.message().contains("authorization: Bearer"),
        "{status:?}"
    );

    let forged = "lh_0000000000000000000000000000000000000000000000000000000000000000";
    let mut wrong = as_(&broker, Some(forged)).await;
    let status = wrong
        .acquire(acquire_req("x", 5_000, "h", 0))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(!status.message().contains(forged), "{status:?}");
    let stream = wrong
        .keep_alive(tokio_stream::iter(Vec::<KeepAliveRequest>::new()))
        .await
        .unwrap_err();
    assert_eq!(stream.code(), Code::Unauthenticated);

    // Another scheme than Bearer.
    let mut basic =
        leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient::with_interceptor(
            broker.channel().await,
            |mut r: tonic::Request<()>| {
                r.metadata_mut()
                    .insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
                Ok(r)
            },
        );
    let status = basic.describe(describe("x")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("Bearer <token>"), "{status:?}");

    let mut health = tonic_health::pb::health_client::HealthClient::new(broker.channel().await);
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health needs no credential");
    assert_eq!(serving.into_inner().status, 1);

    let text = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(
            &text,
            r#"leasehold_rejected_total{reason="unauthenticated"}"#
        ),
        4.0,
        "{text}"
    );
}

/// `admin` may describe and revoke any tenant's lock (the holder then hears
/// it is gone) but, without `use`, may not take locks; `use` may not revoke.
#[tokio::test]
async fn permissions_decide_what_a_credential_may_do() {
    let redis = RedisServer::start();
    let tokens = Tokens::new("permissions", "");
    let broker = broker(&redis.url(), &tokens).await;
    let mut payments = as_(&broker, Some(&tokens.payments)).await;
    let mut ops = as_(&broker, Some(&tokens.ops)).await;
    let lease = take(&mut payments, "ledger").await;

    let own = payments
        .revoke(RevokeRequest {
            name: "ledger".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(own.code(), Code::PermissionDenied);
    assert!(own.message().contains("'admin'"), "{own:?}");
    let take = ops
        .acquire(acquire_req("mine", 5_000, "ops", 0))
        .await
        .unwrap_err();
    assert_eq!(take.code(), Code::PermissionDenied);
    assert!(take.message().contains("'use'"), "{take:?}");

    let seen = ops
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "payments".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(seen.held && seen.fence == lease.fence, "{seen:?}");
    let revoked = ops
        .revoke(RevokeRequest {
            name: "ledger".into(),
            tenant: "payments".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revoked.fence, lease.fence);
    let renew = payments
        .renew(RenewRequest {
            name: "ledger".into(),
            owner_token: lease.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(renew.code(), Code::NotFound);
    assert!(renew.message().contains("revoked"), "{renew:?}");
    let bad = ops
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "no|such".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    let text = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(
            &text,
            r#"leasehold_rejected_total{reason="permission_denied"}"#
        ),
        2.0
    );
}

/// An `anonymous` line lets callers without credentials in, as that tenant
/// only; tokens still reach their own tenants.
#[tokio::test]
async fn anonymous_callers_get_their_own_tenant_when_the_file_says_so() {
    let tokens = Tokens::new("anonymous", "public use anonymous\n");
    let broker = broker("memory", &tokens).await;
    let mut anonymous = as_(&broker, None).await;
    let mut payments = as_(&broker, Some(&tokens.payments)).await;
    take(&mut anonymous, "shared").await;
    take(&mut payments, "shared").await;
    let d = anonymous
        .describe(describe("shared"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.holder, "h");
    assert!(d.held);
    let wrong = as_(&broker, Some("lh_not-a-known-token"))
        .await
        .describe(describe("shared"))
        .await
        .unwrap_err();
    assert_eq!(
        wrong.code(),
        Code::Unauthenticated,
        "a wrong token is not anonymous"
    );
}

/// Over mutual TLS, a client certificate's common name or URI SAN (a SPIFFE
/// ID) names the tenant; a certificate the file does not name is refused
/// (saying which names it bears); a token, when sent, decides instead.
#[tokio::test]
async fn client_certificates_name_tenants() {
    let dir = scratch("auth-mtls");
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let (cert, key) = write_server(&dir, &server_ca.issue(&["localhost"]));
    let client_ca_path = dir.join("clients.crt");
    std::fs::write(&client_ca_path, &client_ca.pem).unwrap();
    let tokens = Tokens::new(
        "auth-mtls",
        "payments use cert:payments-worker\nbilling use cert:spiffe://example.org/billing\n",
    );
    let auth_file = tokens.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.tls_cert = Some(cert.into());
        c.tls_key = Some(key.into());
        c.tls_client_ca = Some(client_ca_path);
        c.auth_file = Some(auth_file);
    })
    .await;
    let connect = |identity: (String, String), token: Option<String>| {
        let (addr, ca) = (broker.addr, server_ca.pem.clone());
        async move {
            let tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost")
                .identity(Identity::from_pem(identity.0, identity.1));
            let channel: Channel = Endpoint::from_shared(format!("https://{addr}"))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .unwrap();
            Credentials::bearer(token.as_deref())
                .unwrap()
                .client(channel)
        }
    };

    let mut by_cn = connect(client_ca.issue_client("payments-worker", &[]), None).await;
    let mut by_uri = connect(
        client_ca.issue_client("billing-7f9c", &["spiffe://example.org/billing"]),
        None,
    )
    .await;
    let mut by_token = connect(
        client_ca.issue_client("payments-worker", &[]),
        Some(tokens.billing.clone()),
    )
    .await;
    let mut stranger = connect(client_ca.issue_client("stranger", &[]), None).await;

    let lease = take(&mut by_cn, "cert-lock").await;
    // Billing (by URI SAN, or by token on a payments certificate) sees its
    // own namespace, not payments'.
    for client in [&mut by_uri, &mut by_token] {
        let d = client
            .describe(describe("cert-lock"))
            .await
            .unwrap()
            .into_inner();
        assert!(!d.held, "{d:?}");
    }
    take(&mut by_uri, "cert-lock").await;
    let d = by_token
        .describe(describe("cert-lock"))
        .await
        .unwrap()
        .into_inner();
    assert!(d.held, "token and URI SAN are both billing");
    let refused = stranger.describe(describe("cert-lock")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(refused.message().contains("stranger"), "{refused:?}");
    let d = by_cn
        .describe(describe("cert-lock"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.fence, lease.fence);
}

/// SIGHUP reloads the auth file: a token added works, a token removed is
/// refused from then on, and a broken file keeps the credentials in force.
#[tokio::test]
async fn sighup_reloads_the_auth_file() {
    let tokens = Tokens::new("auth-reload", "");
    let log = tokens.file.with_file_name("broker.log");
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--auth-file", tokens.file.to_str().unwrap()],
        Some(&log),
    )
    .await;
    let url = broker.url();
    let call = |token: String| {
        let url = url.clone();
        async move {
            let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
            Credentials::bearer(Some(&token))
                .unwrap()
                .client(channel)
                .describe(describe("x"))
                .await
                .map(|_| ())
                .map_err(|s| s.code())
        }
    };
    assert_eq!(call(tokens.payments.clone()).await, Ok(()));
    let newcomer = generate_token().unwrap();
    assert_eq!(call(newcomer.clone()).await, Err(Code::Unauthenticated));

    // Rotate: payments' token out, a new one in.
    std::fs::write(
        &tokens.file,
        format!("payments use {}\n", token_credential(&newcomer)),
    )
    .unwrap();
    broker.hang_up();
    eventually(Duration::from_secs(10), "the new token is accepted", || {
        let call = call(newcomer.clone());
        async move { call.await.is_ok() }
    })
    .await;
    assert_eq!(
        call(tokens.payments.clone()).await,
        Err(Code::Unauthenticated)
    );

    std::fs::write(&tokens.file, "payments use token:sha256:oops\n").unwrap();
    broker.hang_up();
    eventually(
        Duration::from_secs(10),
        "the failed reload is logged",
        || {
            let log = log.clone();
            async move {
                std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .contains("auth file reload failed")
            }
        },
    )
    .await;
    assert_eq!(
        call(newcomer).await,
        Ok(()),
        "the broken file changed nothing"
    );
}

/// A changed auth file is picked up by itself (as a Kubernetes Secret
/// update, which sends no signal), within `--reload-interval`, also after a
/// broken one was refused.
#[tokio::test]
async fn a_changed_auth_file_is_picked_up_without_a_signal() {
    let tokens = Tokens::new("auth-watch", "");
    let file = tokens.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.reload_interval = Duration::from_millis(100);
    })
    .await;
    let newcomer = generate_token().unwrap();
    let mut client = as_(&broker, Some(&newcomer)).await;
    let refused = client.describe(describe("x")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    // First a file the parser once panicked on (a multi-byte character
    // across a hash's byte pairs, then bytes that are not UTF-8): the
    // reload fails, the credentials in force stay, and the watcher lives on.
    let mut broken = format!("payments use token:sha256:a{}b\n", "é".repeat(31)).into_bytes();
    broken.extend_from_slice(b"ops use \xff\xfe anonymous\n");
    std::fs::write(&tokens.file, broken).unwrap();
    // No event says "tried and failed": give the watcher five intervals.
    tokio::time::sleep(Duration::from_millis(500)).await;
    as_(&broker, Some(&tokens.payments))
        .await
        .describe(describe("x"))
        .await
        .expect("the broken file changed nothing");
    std::fs::write(
        &tokens.file,
        format!("payments use {}\n", token_credential(&newcomer)),
    )
    .unwrap();
    eventually(Duration::from_secs(10), "the new token is accepted", || {
        let mut client = client.clone();
        async move { client.describe(describe("x")).await.is_ok() }
    })
    .await;
    let old = as_(&broker, Some(&tokens.payments))
        .await
        .describe(describe("x"))
        .await
        .unwrap_err();
    assert_eq!(old.code(), Code::Unauthenticated);
}

/// `leasehold token` prints a token and its auth-file line; the CLI sends
/// the token from LEASEHOLD_AUTH_TOKEN or --auth-token-file, apart from the
/// owner token that `acquire` prints as LEASEHOLD_TOKEN.
#[tokio::test]
async fn the_cli_makes_tokens_and_sends_them() {
    let dir = scratch("auth-cli");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["token", "--tenant", "jobs", "--permissions", "use,admin"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let token = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    let line = String::from_utf8(made.stderr).unwrap().trim().to_owned();
    assert!(token.starts_with("lh_"), "{token}");
    assert_eq!(line, format!("jobs use,admin {}", token_credential(&token)));
    assert!(!line.contains(&token));
    let file = dir.join("auth");
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let broker =
        BrokerProcess::start_logged("memory", &["--auth-file", file.to_str().unwrap()], None).await;

    let cli = |env_token: Option<&str>, args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command.args(args).args(["--broker", &broker.url()]);
        command.env_remove("LEASEHOLD_AUTH_TOKEN");
        if let Some(t) = env_token {
            command.env("LEASEHOLD_AUTH_TOKEN", t);
        }
        command.output().unwrap()
    };
    let out = cli(
        Some(&token),
        &["acquire", "--lock", "nightly", "--ttl", "30s"],
    );
    assert!(out.status.success(), "{out:?}");
    // `eval "$(leasehold acquire ...)"` exports LEASEHOLD_TOKEN, the owner
    // token, which `release` reads; the bearer token is another variable.
    let printed = String::from_utf8(out.stdout).unwrap();
    let owner = printed
        .lines()
        .find_map(|l| l.strip_prefix("export LEASEHOLD_TOKEN="))
        .expect("acquire prints the owner token")
        .trim_matches('\'')
        .to_owned();
    assert!(!printed.contains(&token), "the bearer token is not printed");
    let out = cli(
        Some(&token),
        &["acquire", "--lock", "nightly-2", "--ttl", "30s"],
    );
    let owner2 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("export LEASEHOLD_TOKEN="))
        .map(|t| t.trim_matches('\'').to_owned())
        .unwrap();
    let released = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["release", "--lock", "nightly-2", "--broker", &broker.url()])
        .env("LEASEHOLD_TOKEN", &owner2)
        .env("LEASEHOLD_AUTH_TOKEN", &token)
        .output()
        .unwrap();
    assert!(released.status.success(), "{released:?}");
    assert!(!owner.is_empty());
    let out = cli(
        None,
        &[
            "describe",
            "--lock",
            "nightly",
            "--auth-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("held=true"),
        "{out:?}"
    );
    // No token: UNAUTHENTICATED exits 77 (EX_NOPERM: a credential to fix),
    // not 69, which a retry loop would retry.
    let out = cli(None, &["describe", "--lock", "nightly"]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Bearer"),
        "{out:?}"
    );
    // --stdin turns a token of one's own into its line.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["token", "--tenant", "jobs", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{token}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!("jobs use {}", token_credential(&token))
    );
}

/// One grant in a side-by-side run, and the broker that made it.
struct Turn {
    broker: &'static str,
    grant: Grant,
}

const ROLLOUT_TTL_MS: u64 = 5_000;

/// Cycles waiting Acquire / short hold / Release of `lock` through `client`
/// until `stop`, recording each grant. Any status but ABORTED (the wait
/// ran out) fails the test.
async fn contend(
    mut client: Grpc,
    broker: &'static str,
    id: usize,
    lock: &'static str,
    stop: tokio::time::Instant,
) -> Vec<Turn> {
    let mut grants = Vec::new();
    // Clients of the two brokers apart in the history.
    let who = id + if broker == "new" { 1_000 } else { 0 };
    while tokio::time::Instant::now() < stop {
        let sent = tokio::time::Instant::now();
        let holder = format!("{broker}-{id}");
        let lease = match client
            .acquire(acquire_req(lock, ROLLOUT_TTL_MS, &holder, 2_000))
            .await
        {
            Ok(r) => r.into_inner().lease.expect("a lease"),
            Err(s) if s.code() == Code::Aborted => continue,
            Err(s) => panic!("{holder}: acquire {lock}: {s:?}"),
        };
        let from = tokio::time::Instant::now();
        // A short hold, during which any other grant is a second holder.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let release_sent = tokio::time::Instant::now();
        let until = match client
            .release(ReleaseRequest {
                name: lock.into(),
                owner_token: lease.owner_token,
            })
            .await
        {
            Ok(_) => release_sent,
            // Relied on until it could have expired.
            Err(s) if s.code() == Code::NotFound => sent + Duration::from_millis(ROLLOUT_TTL_MS),
            Err(s) => panic!("{holder}: release {lock}: {s:?}"),
        };
        grants.push(Turn {
            broker,
            grant: Grant::new(
                lock,
                who,
                lease.fence,
                sent.into_std(),
                from.into_std(),
                until.into_std(),
            ),
        });
    }
    grants
}

/// A rolling update that turns authentication on (issue 14, point 5): an
/// old replica without `--auth-file` and a new one whose file maps the
/// callers' token to `tenant` serve one Redis at once, 4 contenders on
/// each waiting for one lock, for 3 s. Returns every grant, and whether
/// the new replica's caller saw the old one's holder before the run.
async fn side_by_side(test: &str, tenant: &str) -> (Vec<Turn>, bool) {
    let redis = RedisServer::start();
    let token = generate_token().unwrap();
    let tokens = Tokens::new(
        test,
        &format!("{tenant} use {}\n", token_credential(&token)),
    );
    let old = Broker::start(&redis.url()).await;
    let new = broker(&redis.url(), &tokens).await;

    // One holder, taken through the old replica: the new replica's caller
    // is refused the lock (ABORTED) exactly when it names the same lock.
    let mut first = as_(&old, None).await;
    let held = take(&mut first, "rollout").await;
    let mut newcomer = as_(&new, Some(&token)).await;
    let blocked = match newcomer
        .acquire(acquire_req("rollout", 30_000, "new", 0))
        .await
    {
        Err(s) if s.code() == Code::Aborted => {
            assert!(s.message().contains("'h'"), "names the old holder: {s:?}");
            true
        }
        Ok(granted) => {
            let lease = granted.into_inner().lease.unwrap();
            newcomer
                .release(ReleaseRequest {
                    name: "rollout".into(),
                    owner_token: lease.owner_token,
                })
                .await
                .unwrap();
            false
        }
        Err(s) => panic!("acquire through the new replica: {s:?}"),
    };
    first
        .release(ReleaseRequest {
            name: "rollout".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();

    let stop = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut contenders = Vec::new();
    for id in 0..4 {
        contenders.push(tokio::spawn(contend(
            as_(&old, None).await,
            "old",
            id,
            "rollout",
            stop,
        )));
        contenders.push(tokio::spawn(contend(
            as_(&new, Some(&token)).await,
            "new",
            id,
            "rollout",
            stop,
        )));
    }
    let mut grants = Vec::new();
    for c in contenders {
        grants.extend(c.await.unwrap());
    }
    let count = |b: &str| grants.iter().filter(|g| g.broker == b).count();
    eprintln!(
        "{tenant}: {} grants through the old replica, {} through the new",
        count("old"),
        count("new")
    );
    // Both replicas really contended: the run says something of each.
    assert!(
        count("old") >= 20 && count("new") >= 20,
        "too few grants: old {}, new {}",
        count("old"),
        count("new")
    );
    (grants, blocked)
}

fn violations(turns: &[Turn], broker: Option<&str>) -> Vec<String> {
    let grants: Vec<Grant> = turns
        .iter()
        .filter(|t| broker.is_none_or(|b| t.broker == b))
        .map(|t| t.grant.clone())
        .collect();
    history::check(&grants, &history::Excuses::default()).violations
}

/// With the callers' token mapped to `@root`, the old replica's and the new
/// replica's callers contend for one lock: one holder at a time, fences
/// strictly rising in grant order, across both replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_auth_on_keeps_one_holder_when_callers_map_to_root() {
    let (grants, blocked) = side_by_side("rollout-root", "@root").await;
    assert!(
        blocked,
        "the new replica granted the old replica's held lock"
    );
    let broken = violations(&grants, None);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The check above can fail: with the token mapped to an ordinary tenant
/// (the rollout that broke), the new replica grants `jobs|rollout` while
/// the old one grants `rollout`, and their holders overlap, though each
/// replica alone keeps one holder at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_auth_on_grants_one_lock_twice_when_callers_move_to_a_tenant() {
    let (grants, blocked) = side_by_side("rollout-tenant", "jobs").await;
    assert!(!blocked, "the new replica's caller saw the old holder");
    for broker in ["old", "new"] {
        let broken = violations(&grants, Some(broker));
        assert!(broken.is_empty(), "{broker}: {}", broken.join("\n"));
    }
    let broken = violations(&grants, None);
    eprintln!("jobs: {} violations across the replicas", broken.len());
    assert!(
        broken.iter().any(|v| v.starts_with("(c)")),
        "no overlap between the replicas' holders in {} grants",
        grants.len()
    );
}

/// An administrator reaches the root namespace by its name, `@root`, in
/// Describe and Revoke: from a replica with authentication, the lock a
/// replica without it granted.
#[tokio::test]
async fn administrators_name_the_root_namespace_at_root() {
    let redis = RedisServer::start();
    let tokens = Tokens::new("rollout-admin", "");
    let old = Broker::start(&redis.url()).await;
    let new = broker(&redis.url(), &tokens).await;
    let mut unauthenticated = as_(&old, None).await;
    let lease = take(&mut unauthenticated, "ledger").await;
    // Without auth the caller is in `@root`: naming it is naming its own.
    let own = unauthenticated
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "@root".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(own.held && own.fence == lease.fence, "{own:?}");

    let mut ops = as_(&new, Some(&tokens.ops)).await;
    let d = ops
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "@root".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == lease.fence, "{d:?}");
    // A tenant's user may not look there.
    let mut payments = as_(&new, Some(&tokens.payments)).await;
    let e = payments
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "@root".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = ops
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "@nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("@root"), "{e:?}");
    let fence = ops
        .revoke(RevokeRequest {
            name: "ledger".into(),
            tenant: "@root".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .fence;
    assert_eq!(fence, lease.fence);
    let gone = unauthenticated
        .renew(RenewRequest {
            name: "ledger".into(),
            owner_token: lease.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    assert!(gone.message().contains("revoked"), "{gone:?}");
}

/// What moving a credential from tenant A to tenant B means, as
/// docs/security.md says: its leases stay in A until their TTL, unary
/// renewals and releases of them fail (NOT_FOUND, or FAILED_PRECONDITION
/// once B's lock of that name is held), new acquires take B's locks, and a
/// KeepAlive stream opened before the move ends at the reload.
#[tokio::test]
async fn moving_a_credential_to_another_tenant_leaves_its_leases_behind() {
    let redis = RedisServer::start();
    let tokens = Tokens::new("auth-move", "");
    let file = tokens.file.clone();
    let broker = Broker::start_with(&redis.url(), move |c| {
        c.auth_file = Some(file);
        c.reload_interval = Duration::from_millis(100);
    })
    .await;
    let mut mover = as_(&broker, Some(&tokens.payments)).await;
    let before = take(&mut mover, "ledger").await;
    let streamed = take(&mut mover, "report").await;
    let heartbeat = |seq| KeepAliveRequest {
        seq,
        leases: vec![LeaseRef {
            name: "report".into(),
            owner_token: streamed.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (beats, rx) = tokio::sync::mpsc::channel(1);
    let mut opened_before = mover
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();

    // payments' token now belongs to billing.
    std::fs::write(
        &tokens.file,
        format!(
            "billing use {}\nops admin {}\n",
            token_credential(&tokens.payments),
            token_credential(&tokens.ops)
        ),
    )
    .unwrap();
    eventually(Duration::from_secs(10), "the move is loaded", || {
        let mut mover = mover.clone();
        async move {
            let d = mover.describe(describe("ledger")).await.unwrap();
            !d.into_inner().held
        }
    })
    .await;

    let renew = |client: &mut Grpc| {
        let mut client = client.clone();
        let token = before.owner_token.clone();
        async move {
            client
                .renew(RenewRequest {
                    name: "ledger".into(),
                    owner_token: token,
                    ttl_ms: 0,
                    ..Default::default()
                })
                .await
                .unwrap_err()
        }
    };
    let e = renew(&mut mover).await;
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // The lease is still payments', held until its TTL runs out.
    let mut ops = as_(&broker, Some(&tokens.ops)).await;
    let in_a = ops
        .describe(DescribeRequest {
            name: "ledger".into(),
            tenant: "payments".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(in_a.held && in_a.fence == before.fence, "{in_a:?}");
    // A new acquire takes billing's lock, while payments' is still held.
    let after = take(&mut mover, "ledger").await;
    assert_ne!(after.owner_token, before.owner_token);
    let e = renew(&mut mover).await;
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    // The stream opened before the move ended at the reload (it renewed in
    // payments' namespace); one opened after it does not find the lease.
    let status = ended(&mut opened_before).await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("'billing'"), "{status:?}");
    drop(beats);
    let mut opened_after = mover
        .keep_alive(tokio_stream::iter(vec![heartbeat(2)]))
        .await
        .unwrap()
        .into_inner();
    let answer = opened_after.message().await.unwrap().unwrap();
    assert_eq!(answer.leases[0].state(), lease_status::State::Lost);
}

/// The status a response stream ends with, within 10 s.
async fn ended<T>(answers: &mut tonic::Streaming<T>) -> tonic::Status {
    tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("the stream ended at the reload")
        .err()
        .expect("ended with a status")
}

/// A KeepAlive stream renewing `lease` as `client`, answered once (ALIVE).
async fn renewing(
    client: &mut Grpc,
    lease: &Lease,
) -> (
    tokio::sync::mpsc::Sender<KeepAliveRequest>,
    tonic::Streaming<leasehold_server::proto::KeepAliveResponse>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let heartbeat = KeepAliveRequest {
        seq: 1,
        leases: vec![LeaseRef {
            name: lease.name.clone(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    };
    tx.send(heartbeat).await.unwrap();
    let mut answers = client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.leases[0].state(), lease_status::State::Alive);
    (tx, answers)
}

/// A credential removed from the auth file, or stripped of `use`, ends the
/// KeepAlive and Observe streams opened with it (UNAUTHENTICATED,
/// PERMISSION_DENIED) at the reload; their leases are no longer renewed and
/// run out at their TTL.
/// A stream whose credential is unchanged goes on.
#[tokio::test]
async fn a_withdrawn_credential_ends_its_streams() {
    let steady = generate_token().unwrap();
    let steady_line = format!("steady use {}\n", token_credential(&steady));
    let tokens = Tokens::new("auth-withdraw", &steady_line);
    let file = tokens.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.reload_interval = Duration::from_millis(100);
    })
    .await;
    let mut payments = as_(&broker, Some(&tokens.payments)).await;
    let mut billing = as_(&broker, Some(&tokens.billing)).await;
    let ops = as_(&broker, Some(&tokens.ops)).await;
    let short = |name: &str| acquire_req(name, 2_000, "h", 0);
    let gone = payments.acquire(short("gone")).await.unwrap().into_inner();
    let demoted = billing
        .acquire(short("demoted"))
        .await
        .unwrap()
        .into_inner();
    let (_p, mut p_answers) = renewing(&mut payments, gone.lease.as_ref().unwrap()).await;
    let (_b, mut b_answers) = renewing(&mut billing, demoted.lease.as_ref().unwrap()).await;
    // An Observe stream of each, answered once (the election's state).
    let observing = |client: &mut Grpc| {
        let mut client = client.clone();
        async move {
            let mut changes = client
                .observe(ObserveRequest {
                    election: "watched".into(),
                })
                .await
                .unwrap()
                .into_inner();
            changes.message().await.unwrap().expect("the current state");
            changes
        }
    };
    let mut p_changes = observing(&mut payments).await;
    let mut b_changes = observing(&mut billing).await;
    let mut s_changes = observing(&mut as_(&broker, Some(&steady)).await).await;
    // An `admin`-only line stays for ops; billing keeps only `admin`;
    // payments is gone.
    std::fs::write(
        &tokens.file,
        format!(
            "billing admin {}\nops admin {}\n{steady_line}",
            token_credential(&tokens.billing),
            token_credential(&tokens.ops)
        ),
    )
    .unwrap();
    let status = ended(&mut p_answers).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(!status.message().contains(&tokens.payments));
    let status = ended(&mut b_answers).await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("`use`"), "{status:?}");
    let status = ended(&mut p_changes).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let status = ended(&mut b_changes).await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // The same reload left the unchanged credential's stream open.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), s_changes.message())
            .await
            .is_err(),
        "a stream whose credential is unchanged goes on"
    );
    // Not renewed any more: the 2 s lease runs out.
    eventually(Duration::from_secs(10), "the lease ran out", || {
        let mut ops = ops.clone();
        async move {
            ops.describe(DescribeRequest {
                name: "gone".into(),
                tenant: "payments".into(),
            })
            .await
            .is_ok_and(|d| !d.into_inner().held)
        }
    })
    .await;
    let metrics = scrape(broker.metrics_addr).await;
    assert!(
        sample(
            &metrics,
            "leasehold_rejected_total{reason=\"unauthenticated\"}"
        ) >= 1.0
    );
    assert!(
        sample(
            &metrics,
            "leasehold_rejected_total{reason=\"permission_denied\"}"
        ) >= 1.0
    );
}
