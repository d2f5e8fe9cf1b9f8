//! The HTTP/JSON API (`--http-listen`, server/src/service/gateway/): the
//! unary calls over plain HTTP with the real `curl`, on a broker over a
//! real redis-server and a real PostgreSQL: the lease's whole life, the
//! refusals as gRPC's reasons with their HTTP statuses, authentication and
//! tenants, the bounds (body size, media type, routes, slow clients), and
//! a waiting Acquire that gives up its place when its client goes away.

use leasehold_testkit as common;

use std::{
    net::SocketAddr,
    process::Stdio,
    time::{Duration, Instant},
};

use common::{
    certs::scratch, postgres::PostgresServer, tenants::TenantTokens, Broker, RedisServer,
};
use leasehold_server::config::ServeConfig;
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::Command,
};

/// A broker on `store` with the JSON API on a port of its own, once it
/// serves (asked with `token`, if the broker needs one).
async fn broker(
    store: &str,
    token: Option<&str>,
    adjust: impl FnOnce(&mut ServeConfig),
) -> (Broker, SocketAddr) {
    let broker = Broker::start_with(store, |c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(c);
    })
    .await;
    let http = broker.http_addr.expect("the JSON API's address");
    // Served once the store answers (the health ping).
    for _ in 0..100 {
        if curl(http, "GET", "/v1/status", token, None).await.body["store"]["serving"] == true {
            return (broker, http);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the broker at {http} did not serve within 10 s");
}

/// What curl got.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The response headers, lowercased names, as `name: value` lines.
    headers: String,
    /// The body, as JSON (Null if it is not JSON).
    body: Value,
    text: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// The curl command for `method path` on `http`, with `token` as a bearer
/// token and `body` as a JSON body.
fn curl_command(
    http: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--include", "--max-time", "90"])
        .args(["-X", method])
        .kill_on_drop(true);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(body) = body {
        command.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ]);
    }
    command.arg(format!("http://{http}{path}"));
    command
}

/// Runs curl (see [`curl_command`]) and reads its answer.
async fn curl(
    http: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Answer {
    run(curl_command(http, method, path, token, body)).await
}

/// `POST path` with `body` (a JSON value) as `token`.
async fn post(http: SocketAddr, path: &str, token: Option<&str>, body: Value) -> Answer {
    curl(http, "POST", path, token, Some(&body.to_string())).await
}

async fn run(mut command: Command) -> Answer {
    let out = command
        .output()
        .await
        .expect("run curl (install it: apt-get install curl)");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&String::from_utf8(out.stdout).expect("UTF-8"))
}

/// curl's `--include` output: status lines and headers (a `100 Continue`
/// skipped), then the body.
fn parse(output: &str) -> Answer {
    let mut rest = output;
    loop {
        let (head, body) = rest.split_once("\r\n\r\n").expect("headers, then a body");
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        if (100..200).contains(&status) {
            rest = body;
            continue;
        }
        return Answer {
            status,
            headers: head.to_owned(),
            body: serde_json::from_str(body).unwrap_or(Value::Null),
            text: body.to_owned(),
        };
    }
}

/// The lease's whole life over HTTP, and the refusals of a held lock and a
/// bad name, on the broker at `http`.
async fn lifecycle(http: SocketAddr) {
    let name = "jobs/nightly";
    let granted = post(
        http,
        "/v1/acquire",
        None,
        // 64-bit integers as strings (the canonical form) ...
        json!({ "name": name, "ttlMs": "30000", "holder": "pod-a" }),
    )
    .await;
    assert_eq!(granted.status, 200, "{granted:?}");
    assert_eq!(granted.header("content-type"), Some("application/json"));
    let lease = &granted.body["lease"];
    let token = lease["ownerToken"]
        .as_str()
        .expect("an owner token")
        .to_owned();
    let fence = lease["fence"]
        .as_str()
        .expect("the fence, as a string")
        .to_owned();
    assert_eq!(lease["name"], name);
    assert_eq!(lease["ttlMs"], "30000");
    assert_eq!(granted.body["waitedMs"], "0", "every field, zeros too");

    let described = post(http, "/v1/describe", None, json!({ "name": name })).await;
    assert_eq!(described.status, 200, "{described:?}");
    assert_eq!(described.body["held"], true);
    assert_eq!(described.body["holder"], "pod-a");
    assert_eq!(described.body["fence"], fence.as_str());
    assert!(
        described.body.get("ownerToken").is_none(),
        "never the owner token"
    );

    // ... or as numbers, and by their proto names.
    let renewed = post(
        http,
        "/v1/renew",
        None,
        json!({ "name": name, "owner_token": token, "ttl_ms": 20000 }),
    )
    .await;
    assert_eq!(renewed.status, 200, "{renewed:?}");
    assert_eq!(renewed.body["ttlMs"], "20000");
    assert_eq!(renewed.body["fence"], fence.as_str());

    let checked = post(
        http,
        "/v1/check-fence",
        None,
        json!({ "name": name, "fence": fence }),
    )
    .await;
    assert_eq!(checked.status, 200, "{checked:?}");
    assert_eq!(checked.body["current"], true);

    let listed = post(http, "/v1/list", None, json!({ "pageSize": 1000 })).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let locks = listed.body["locks"].as_array().expect("locks");
    let mine = locks
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{name} listed: {listed:?}"));
    assert_eq!(mine["holder"], "pod-a");
    assert_eq!(mine["tenant"], "@root");

    // A held lock: 409, the reason and facts of the gRPC status.
    let refused = post(
        http,
        "/v1/acquire",
        None,
        json!({ "name": name, "holder": "pod-b" }),
    )
    .await;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.body["code"], "ABORTED");
    assert_eq!(refused.body["reason"], "LOCK_HELD");
    assert_eq!(refused.body["metadata"]["holder"], "pod-a");
    assert_eq!(refused.body["metadata"]["fence"], fence.as_str());
    assert!(
        refused.body["retryDelayMs"].as_u64().unwrap() > 0,
        "{refused:?}"
    );
    assert!(
        refused.body["message"].as_str().unwrap().contains("pod-a"),
        "{refused:?}"
    );

    let released = post(
        http,
        "/v1/release",
        None,
        json!({ "name": name, "ownerToken": token }),
    )
    .await;
    assert_eq!(released.status, 200, "{released:?}");
    assert_eq!(released.body, json!({}));

    let checked = post(
        http,
        "/v1/check-fence",
        None,
        json!({ "name": name, "fence": fence }),
    )
    .await;
    assert_eq!(checked.status, 200, "{checked:?}");
    assert_eq!(checked.body["current"], false);
    assert_eq!(checked.body["currentFence"], "0");

    // A renewal of the released lease: NOT_FOUND, 404.
    let gone = post(
        http,
        "/v1/renew",
        None,
        json!({ "name": name, "ownerToken": token }),
    )
    .await;
    assert_eq!(gone.status, 404, "{gone:?}");
    assert_eq!(gone.body["reason"], "LEASE_NOT_HELD");

    // A bad name: 400, BAD_ARGUMENT naming the argument.
    let bad = post(http, "/v1/acquire", None, json!({ "name": "no spaces" })).await;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["code"], "INVALID_ARGUMENT");
    assert_eq!(bad.body["reason"], "BAD_ARGUMENT");
    assert_eq!(bad.body["metadata"]["argument"], "name");

    // A misspelt field is refused, not dropped.
    let typo = post(http, "/v1/acquire", None, json!({ "name": "x", "ttl": 5 })).await;
    assert_eq!(typo.status, 400, "{typo:?}");
    assert_eq!(typo.body["reason"], "BAD_ARGUMENT");
    assert!(
        typo.body["message"].as_str().unwrap().contains("ttl"),
        "{typo:?}"
    );
}

#[tokio::test]
async fn a_lease_lives_and_is_refused_over_http_on_redis() {
    let redis = RedisServer::start();
    let (_broker, http) = broker(&redis.url(), None, |_| {}).await;
    lifecycle(http).await;
}

#[tokio::test]
async fn a_lease_lives_and_is_refused_over_http_on_postgres() {
    let postgres = PostgresServer::start();
    let (_broker, http) = broker(&postgres.url(), None, |_| {}).await;
    lifecycle(http).await;
}

/// With an --auth-file: no token is 401; each tenant sees its own locks
/// and losses; an administrator lists every tenant's and revokes.
#[tokio::test]
async fn credentials_and_tenants_are_the_grpc_ports() {
    let redis = RedisServer::start();
    let TenantTokens {
        payments,
        billing,
        ops,
        file,
    } = TenantTokens::new("http-auth");
    let (_broker, http) = broker(&redis.url(), Some(&ops), |c| {
        c.auth_file = Some(file);
    })
    .await;

    for (method, path, body) in [
        ("POST", "/v1/list", Some("{}")),
        ("POST", "/v1/acquire", Some(r#"{"name":"x"}"#)),
        ("GET", "/v1/status", None),
    ] {
        let refused = curl(http, method, path, None, body).await;
        assert_eq!(refused.status, 401, "{path}: {refused:?}");
        assert_eq!(refused.body["code"], "UNAUTHENTICATED");
        assert_eq!(refused.body["reason"], "UNAUTHENTICATED");
        let wrong = curl(http, method, path, Some("lh_not_a_token"), body).await;
        assert_eq!(wrong.status, 401, "{path}: {wrong:?}");
    }
    // The page holds no data: served without a token, never framed.
    for path in ["/", "/status"] {
        let page = curl(http, "GET", path, None, None).await;
        assert_eq!(page.status, 200, "{page:?}");
        assert!(page
            .header("content-type")
            .unwrap()
            .starts_with("text/html"));
        assert_eq!(page.header("x-frame-options"), Some("DENY"));
        assert!(page
            .header("content-security-policy")
            .unwrap()
            .starts_with("default-src 'self'"));
        assert!(page.header("access-control-allow-origin").is_none());
    }

    let granted = post(
        http,
        "/v1/acquire",
        Some(&payments),
        json!({ "name": "ledger", "holder": "payments-1" }),
    )
    .await;
    assert_eq!(granted.status, 200, "{granted:?}");

    // Billing's "ledger" is another lock, and payments' is not listed.
    let described = post(
        http,
        "/v1/describe",
        Some(&billing),
        json!({ "name": "ledger" }),
    )
    .await;
    assert_eq!(described.body["held"], false, "{described:?}");
    let theirs = post(http, "/v1/list", Some(&billing), json!({})).await;
    assert_eq!(theirs.status, 200, "{theirs:?}");
    assert_eq!(theirs.body["locks"], json!([]), "{theirs:?}");
    let every = post(http, "/v1/list", Some(&billing), json!({ "tenant": "*" })).await;
    assert_eq!(every.status, 403, "{every:?}");
    assert_eq!(every.body["reason"], "PERMISSION_DENIED");

    let every = post(http, "/v1/list", Some(&ops), json!({ "tenant": "*" })).await;
    assert_eq!(every.status, 200, "{every:?}");
    assert!(
        every.body["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["tenant"] == "payments" && l["name"] == "ledger"),
        "{every:?}"
    );

    // The administrator revokes it: a loss, seen by its tenant and the
    // administrator, not by another tenant.
    let revoked = post(
        http,
        "/v1/revoke",
        Some(&ops),
        json!({ "name": "ledger", "tenant": "payments" }),
    )
    .await;
    assert_eq!(revoked.status, 200, "{revoked:?}");
    assert_eq!(revoked.body["fence"], granted.body["lease"]["fence"]);
    let refused = post(
        http,
        "/v1/revoke",
        Some(&payments),
        json!({ "name": "ledger" }),
    )
    .await;
    assert_eq!(refused.status, 403, "{refused:?}");

    let status = curl(http, "GET", "/v1/status", Some(&payments), None).await;
    assert_eq!(status.status, 200, "{status:?}");
    assert_eq!(status.body["tenant"], "payments");
    assert_eq!(status.body["store"]["serving"], true);
    assert_eq!(status.body["version"], env!("CARGO_PKG_VERSION"));
    let losses = status.body["recentLosses"].as_array().unwrap();
    assert_eq!(losses.len(), 1, "{status:?}");
    assert_eq!(losses[0]["name"], "ledger");
    assert_eq!(losses[0]["reason"], "revoked");
    let status = curl(http, "GET", "/v1/status", Some(&billing), None).await;
    assert_eq!(status.body["recentLosses"], json!([]), "{status:?}");
    let status = curl(http, "GET", "/v1/status", Some(&ops), None).await;
    assert_eq!(
        status.body["recentLosses"].as_array().unwrap().len(),
        1,
        "{status:?}"
    );
}

/// What the port refuses before any call: large bodies, other media types,
/// unknown routes, wrong methods; and what it serves without a store call.
#[tokio::test]
async fn bounds_routes_and_media_types() {
    let (_broker, http) = broker("memory", None, |c| c.max_message_size = 1024).await;

    let large = format!(r#"{{"name":"{}"}}"#, "a".repeat(2000));
    let refused = post(
        http,
        "/v1/acquire",
        None,
        serde_json::from_str(&large).unwrap(),
    )
    .await;
    assert_eq!(refused.status, 413, "{refused:?}");
    assert_eq!(refused.body["reason"], "MESSAGE_TOO_LARGE");

    let mut text = curl_command(http, "POST", "/v1/acquire", None, None);
    text.args([
        "-H",
        "Content-Type: text/plain",
        "--data-binary",
        r#"{"name":"x"}"#,
    ]);
    let refused = run(text).await;
    assert_eq!(refused.status, 415, "{refused:?}");
    assert_eq!(refused.body["reason"], "UNSUPPORTED_MEDIA_TYPE");

    let unknown = post(http, "/v1/nothing", None, json!({})).await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(unknown.body["reason"], "UNKNOWN_ROUTE");
    let routes = unknown.body["routes"].as_array().unwrap();
    assert!(routes.contains(&json!("POST /v1/acquire")), "{unknown:?}");
    assert!(routes.contains(&json!("GET /v1/status")), "{unknown:?}");

    // A request head larger than a connection may buffer.
    let mut big = curl_command(http, "GET", "/v1/status", None, None);
    big.args(["-H", &format!("X-Padding: {}", "p".repeat(100_000))]);
    let refused = run(big).await;
    assert_eq!(refused.status, 431, "{refused:?}");

    let wrong = curl(http, "GET", "/v1/acquire", None, None).await;
    assert_eq!(wrong.status, 405, "{wrong:?}");
    assert_eq!(wrong.header("allow"), Some("POST"));

    let document = curl(http, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(document.status, 200, "{document:?}");
    let checked_in =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json")).unwrap();
    assert_eq!(
        document.text, checked_in,
        "the checked-in document is served"
    );
    assert!(document.body["paths"]["/v1/check-fence"]["post"].is_object());

    // Leader, and HTTP/2 in plaintext for a client that knows (h2c).
    let mut h2 = curl_command(
        http,
        "POST",
        "/v1/leader",
        None,
        Some(r#"{"election":"nobody"}"#),
    );
    h2.arg("--http2-prior-knowledge");
    let leader = run(h2).await;
    assert!(leader.headers.starts_with("HTTP/2 200"), "{leader:?}");
    assert_eq!(
        leader.body,
        json!({ "present": false, "value": "", "term": "0", "remainingMs": "0" })
    );

    // An empty body is the empty message; List of nothing is an empty page.
    let mut empty = curl_command(http, "POST", "/v1/list", None, None);
    empty.args(["-H", "Content-Type: application/json"]);
    let listed = run(empty).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.body, json!({ "locks": [], "nextPageToken": "" }));

    // A place kept in line comes back in the body, where gRPC has it in
    // the leasehold-place metadata.
    let held = post(http, "/v1/acquire", None, json!({ "name": "kept" })).await;
    assert_eq!(held.status, 200, "{held:?}");
    let kept = post(
        http,
        "/v1/acquire",
        None,
        json!({ "name": "kept", "waitTimeoutMs": 200, "keepPlace": true }),
    )
    .await;
    assert_eq!(kept.status, 409, "{kept:?}");
    assert_eq!(
        kept.body["place"].as_str().map(str::len),
        Some(32),
        "{kept:?}"
    );
    assert!(
        kept.body["metadata"]["place_kept_ms"].is_string(),
        "{kept:?}"
    );
}

/// A client that sends half a request, or nothing, is cut off at
/// --http-timeout, and one that sends its headers but not all its body
/// hears why.
#[tokio::test]
async fn slow_clients_are_cut_off_at_the_timeout() {
    let timeout = Duration::from_secs(1);
    let (_broker, http) = broker("memory", None, |c| c.http_timeout = timeout).await;

    for first in [
        &b""[..],
        b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Ty",
    ] {
        let mut socket = TcpStream::connect(http).await.unwrap();
        socket.write_all(first).await.unwrap();
        let started = Instant::now();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
            .await
            .expect("closed within 10 s");
        let held = started.elapsed();
        assert!(
            held >= timeout - Duration::from_millis(100) && held < timeout * 3,
            "{:?} sent, held {held:?}: {read:?} {}",
            String::from_utf8_lossy(first),
            String::from_utf8_lossy(&answer)
        );
    }

    let mut socket = TcpStream::connect(http).await.unwrap();
    socket
        .write_all(
            b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"name\":",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("answered and closed within 10 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(started.elapsed() < timeout * 3);
}

/// A waiting Acquire whose client goes away (curl killed) leaves the line
/// at once, as a cancelled gRPC call does: the next waiter is granted the
/// lock at its release, not after the first waiter's wait.
#[tokio::test]
async fn a_waiting_acquire_whose_client_is_killed_gives_up_its_place() {
    let redis = RedisServer::start();
    let (_broker, http) = broker(&redis.url(), None, |_| {}).await;
    let name = "queue/head";
    let held = post(
        http,
        "/v1/acquire",
        None,
        json!({ "name": name, "holder": "a" }),
    )
    .await;
    assert_eq!(held.status, 200, "{held:?}");
    let token = held.body["lease"]["ownerToken"]
        .as_str()
        .unwrap()
        .to_owned();

    let wait = |holder: &str| {
        let mut command = curl_command(
            http,
            "POST",
            "/v1/acquire",
            None,
            Some(&json!({ "name": name, "holder": holder, "waitTimeoutMs": 60000 }).to_string()),
        );
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command.spawn().expect("run curl")
    };
    let mut first = wait("b");
    until_waiters(http, name, 1).await;
    let second = wait("c");
    until_waiters(http, name, 2).await;

    first.kill().await.unwrap();
    until_waiters(http, name, 1).await;

    let released = post(
        http,
        "/v1/release",
        None,
        json!({ "name": name, "ownerToken": token }),
    )
    .await;
    assert_eq!(released.status, 200, "{released:?}");
    let released_at = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(10), second.wait_with_output())
        .await
        .expect("the second waiter answered")
        .unwrap();
    let granted = parse(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(granted.status, 200, "{granted:?}");
    assert_eq!(granted.body["lease"]["name"], name);
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "granted {:?} after the release",
        released_at.elapsed()
    );
    let described = post(http, "/v1/describe", None, json!({ "name": name })).await;
    assert_eq!(described.body["holder"], "c", "{described:?}");
}

/// Waits until `count` callers are queued for `name`.
async fn until_waiters(http: SocketAddr, name: &str, count: u64) {
    let mut seen = String::new();
    for _ in 0..100 {
        let described = post(http, "/v1/describe", None, json!({ "name": name })).await;
        if described.body["waiters"]
            .as_str()
            .and_then(|w| w.parse().ok())
            == Some(count)
        {
            return;
        }
        seen = described.text;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never {count} waiters on {name}: {seen}");
}

/// Over mutual TLS, the port is the gRPC port's: the same certificate and
/// CA, HTTP/2 by ALPN, and a client certificate is a credential (its
/// tenant is the caller's), read from the connection as on gRPC.
#[tokio::test]
async fn mutual_tls_and_client_certificates_are_the_grpc_ports() {
    use common::certs::{write_server, Ca};
    let dir = scratch("http-tls");
    let (server_ca, client_ca) = (Ca::new("server CA"), Ca::new("client CA"));
    let (cert, key) = write_server(&dir, &server_ca.issue(&["localhost", "127.0.0.1"]));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let server_ca_file = write("server-ca.pem", &server_ca.pem);
    let client_ca_file = write("client-ca.pem", &client_ca.pem);
    let (client_cert, client_key) = client_ca.issue_client("app.example", &[]);
    let client_cert = write("client.crt", &client_cert);
    let client_key = write("client.key", &client_key);
    let auth = write("auth", "apps use cert:app.example\n");
    let broker = Broker::start_with("memory", |c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        c.tls_cert = Some(cert.into());
        c.tls_key = Some(key.into());
        c.tls_client_ca = Some(client_ca_file);
        c.auth_file = Some(auth);
    })
    .await;
    let http = broker.http_addr.unwrap();
    let call = |path: &str, body: Option<&str>, with_cert: bool| {
        let mut command = Command::new("curl");
        command
            .args(["--silent", "--show-error", "--include", "--max-time", "30"])
            .arg("--cacert")
            .arg(&server_ca_file)
            .kill_on_drop(true);
        if with_cert {
            command
                .arg("--cert")
                .arg(&client_cert)
                .arg("--key")
                .arg(&client_key);
        }
        if let Some(body) = body {
            command.args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ]);
        }
        command.arg(format!("https://{http}{path}"));
        command
    };

    let mut status = None;
    for _ in 0..100 {
        let answer = run(call("/v1/status", None, true)).await;
        if answer.body["store"]["serving"] == true {
            status = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.expect("served over TLS within 10 s");
    assert!(status.headers.starts_with("HTTP/2 200"), "{status:?}");
    assert_eq!(status.body["tenant"], "apps", "{status:?}");

    let granted = run(call("/v1/acquire", Some(r#"{"name":"tls/x"}"#), true)).await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let listed = run(call("/v1/list", Some("{}"), true)).await;
    assert_eq!(listed.body["locks"][0]["tenant"], "apps", "{listed:?}");

    // HTTP/1.1 over TLS too, for clients that offer nothing else.
    let mut h1 = call("/v1/describe", Some(r#"{"name":"tls/x"}"#), true);
    h1.arg("--http1.1");
    let described = run(h1).await;
    assert!(
        described.headers.starts_with("HTTP/1.1 200"),
        "{described:?}"
    );
    assert_eq!(described.body["held"], true, "{described:?}");

    // Without a client certificate the handshake fails, as on gRPC.
    let out = call("/v1/status", None, false).output().await.unwrap();
    assert!(
        !out.status.success(),
        "a client without a certificate got in"
    );
}

/// Bodies being received are held under the gRPC port's byte budgets
/// (--max-buffer): while one client trickles a body, another whose body
/// would not fit is refused with LIMIT_REACHED (429), and is served once
/// the first is done.
#[tokio::test]
async fn bodies_being_received_share_the_byte_budget() {
    let (_broker, http) = broker("memory", None, |c| {
        c.max_message_size = 1000;
        c.conn_max_buffer = 1000;
        c.max_buffer = 1500;
    })
    .await;
    let mut slow = TcpStream::connect(http).await.unwrap();
    slow.write_all(
        b"POST /v1/describe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"name\":",
    )
    .await
    .unwrap();
    let body = format!(r#"{{"name":"budget","holder":"{}"}}"#, "h".repeat(800));
    let mut refused = None;
    for _ in 0..50 {
        let answer = post(
            http,
            "/v1/acquire",
            None,
            serde_json::from_str(&body).unwrap(),
        )
        .await;
        if answer.status == 429 {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = refused.expect("refused while the slow body holds the budget");
    assert_eq!(refused.body["code"], "RESOURCE_EXHAUSTED", "{refused:?}");
    assert_eq!(refused.body["reason"], "LIMIT_REACHED");
    assert_eq!(refused.body["metadata"]["limit"], "max-buffer");

    // A small body still fits beside it.
    let small = post(http, "/v1/describe", None, json!({ "name": "budget" })).await;
    assert_eq!(small.status, 200, "{small:?}");

    drop(slow);
    let mut answer = None;
    for _ in 0..50 {
        let a = post(
            http,
            "/v1/acquire",
            None,
            serde_json::from_str(&body).unwrap(),
        )
        .await;
        if a.status != 429 {
            answer = Some(a);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = answer.expect("served once the slow body let go");
    assert_eq!(answer.status, 400, "a holder of 800 bytes: {answer:?}");
    assert_eq!(answer.body["metadata"]["argument"], "holder");
}

/// While the store is refused as unsafe (an evicting Redis), every call is
/// UNAVAILABLE over HTTP too (503, Retry-After), and /v1/status says why
/// rather than failing: that is when an operator looks.
#[tokio::test]
async fn an_unsafe_store_is_explained_by_the_status_and_refused_with_503() {
    let redis = RedisServer::start();
    let (_broker, http) = broker(&redis.url(), None, |_| {}).await;
    redis.set_eviction(Some("volatile-lru")).await;
    let mut status = None;
    for _ in 0..100 {
        let answer = curl(http, "GET", "/v1/status", None, None).await;
        if answer.body["store"]["serving"] == false {
            status = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.expect("not serving within 5 s");
    assert_eq!(status.status, 200, "{status:?}");
    assert!(
        status.body["store"]["message"]
            .as_str()
            .unwrap()
            .contains("maxmemory-policy"),
        "{status:?}"
    );

    let refused = post(http, "/v1/acquire", None, json!({ "name": "x" })).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.body["code"], "UNAVAILABLE");
    assert_eq!(refused.body["reason"], "UNAVAILABLE");
    assert_eq!(refused.header("retry-after"), Some("1"), "{refused:?}");

    redis.set_eviction(None).await;
    for _ in 0..100 {
        if curl(http, "GET", "/v1/status", None, None).await.body["store"]["serving"] == true {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("serving again within 5 s of the fix");
}
