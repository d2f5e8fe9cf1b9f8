//! TLS on the gRPC port (issue 8, point 1): a TLS broker refuses plaintext
//! clients and clients that do not trust its CA, mutual TLS admits only
//! clients with a certificate from the client CA, and SIGHUP makes new
//! connections use replaced certificate files. Certificates are generated
//! here (rcgen); no key is committed.

use leasehold_testkit as common;

use common::{
    acquire_req,
    certs::{scratch, write_server, Ca},
    BrokerProcess,
};
use leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A TLS client of `broker` trusting `ca`, presenting `identity` if given.
async fn tls_client(
    broker: &BrokerProcess,
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<LeaseholdServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = Endpoint::from_shared(format!("https://{}", broker.addr))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(LeaseholdServiceClient::new(channel))
}

/// Whether an Acquire through this client succeeds.
async fn works(client: Result<LeaseholdServiceClient<Channel>, tonic::transport::Error>) -> bool {
    match client {
        Ok(mut client) => client
            .acquire(acquire_req(
                &format!("tls/{}", common::free_port()),
                5_000,
                "t",
                0,
            ))
            .await
            .is_ok(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn tls_refuses_plaintext_and_untrusted_clients() {
    let dir = scratch("server");
    let ca = Ca::new("leasehold test CA");
    let (cert, key) = write_server(&dir, &ca.issue(&["localhost", "127.0.0.1"]));
    let broker =
        BrokerProcess::start_logged("memory", &["--tls-cert", &cert, "--tls-key", &key], None)
            .await;

    assert!(
        works(tls_client(&broker, &ca.pem, None).await).await,
        "a client trusting the CA works"
    );

    let plaintext = Endpoint::from_shared(format!("http://{}", broker.addr))
        .unwrap()
        .connect()
        .await
        .map(LeaseholdServiceClient::new);
    assert!(!works(plaintext).await, "a plaintext client was served");

    let other = Ca::new("some other CA");
    assert!(
        !works(tls_client(&broker, &other.pem, None).await).await,
        "a client trusting another CA connected"
    );
}

#[tokio::test]
async fn mutual_tls_admits_only_clients_certified_by_the_client_ca() {
    let dir = scratch("mutual");
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let (cert, key) = write_server(&dir, &server_ca.issue(&["localhost"]));
    let client_ca_path = dir.join("clients.crt");
    std::fs::write(&client_ca_path, &client_ca.pem).unwrap();
    let broker = BrokerProcess::start_logged(
        "memory",
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            client_ca_path.to_str().unwrap(),
        ],
        None,
    )
    .await;

    let good = client_ca.issue(&["app.example"]);
    assert!(
        works(tls_client(&broker, &server_ca.pem, Some(&good)).await).await,
        "a client with a certificate from the client CA works"
    );
    assert!(
        !works(tls_client(&broker, &server_ca.pem, None).await).await,
        "a client without a certificate was served"
    );
    let stranger = Ca::new("stranger CA").issue(&["app.example"]);
    assert!(
        !works(tls_client(&broker, &server_ca.pem, Some(&stranger)).await).await,
        "a client certified by another CA was served"
    );
}

#[tokio::test]
async fn sighup_reloads_the_certificate() {
    let dir = scratch("reload");
    let log = dir.join("broker.log");
    let old_ca = Ca::new("old CA");
    let (cert, key) = write_server(&dir, &old_ca.issue(&["localhost"]));
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--tls-cert", &cert, "--tls-key", &key],
        Some(&log),
    )
    .await;
    assert!(works(tls_client(&broker, &old_ca.pem, None).await).await);

    // The files are replaced by a certificate from another CA, then SIGHUP.
    let new_ca = Ca::new("new CA");
    write_server(&dir, &new_ca.issue(&["localhost"]));
    broker.hang_up();
    // The broker says when it has reloaded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("TLS certificate reloaded")
    {
        assert!(std::time::Instant::now() < deadline, "no reload logged");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        works(tls_client(&broker, &new_ca.pem, None).await).await,
        "new connections get the new certificate"
    );
    assert!(
        !works(tls_client(&broker, &old_ca.pem, None).await).await,
        "the old certificate is still served"
    );

    // A broken file: the reload fails, the current certificate stays.
    std::fs::write(dir.join("server.crt"), "not a certificate").unwrap();
    broker.hang_up();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("TLS reload failed")
    {
        assert!(std::time::Instant::now() < deadline + std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(works(tls_client(&broker, &new_ca.pem, None).await).await);
}

#[tokio::test]
async fn a_missing_certificate_stops_the_broker_naming_the_file() {
    let dir = scratch("missing");
    let missing = dir.join("nowhere.crt");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args([
            "--tls-cert",
            missing.to_str().unwrap(),
            "--tls-key",
            missing.to_str().unwrap(),
        ])
        .output()
        .await
        .unwrap();
    assert!(
        !output.status.success(),
        "the broker started without its certificate"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--tls-cert") && stderr.contains("nowhere.crt"),
        "the error does not name the flag and file: {stderr}"
    );

    let half = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--tls-cert", missing.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(
        !half.status.success(),
        "--tls-cert without --tls-key was accepted"
    );
}

/// The broker reaches a Redis that speaks only TLS and requires a client
/// certificate, verifying it against a private CA, and logs in as an ACL
/// user (the default user is off): `rediss://user:password@...` with
/// --store-ca, --store-client-cert and --store-client-key. Without the CA,
/// it cannot verify Redis and serves nothing.
#[tokio::test]
async fn rediss_with_a_private_ca_a_client_certificate_and_an_acl_user() {
    let dir = scratch("rediss");
    let ca = Ca::new("redis CA");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let (server_cert, server_key) = ca.issue(&["127.0.0.1"]);
    let (client_cert, client_key) = ca.issue(&["leasehold-broker"]);
    let ca_path = write("ca.crt", &ca.pem);
    let redis = common::RedisServer::start_tls(
        &write("redis.crt", &server_cert),
        &write("redis.key", &server_key),
        &ca_path,
        &[
            "--user",
            "default",
            "off",
            "--user",
            "broker",
            "on",
            ">s3cret-acl",
            "~*",
            "&*",
            "+@all",
        ],
    );
    let url = format!("rediss://broker:s3cret-acl@127.0.0.1:{}/", redis.port());
    let client_cert = write("client.crt", &client_cert);
    let client_key = write("client.key", &client_key);

    let broker = BrokerProcess::start_logged(
        &url,
        &[
            "--store-ca",
            &ca_path,
            "--store-client-cert",
            &client_cert,
            "--store-client-key",
            &client_key,
        ],
        None,
    )
    .await;
    let mut client = broker.client().await;
    let lease = common::must_acquire(&mut client, "rediss/a", 5_000).await;
    assert!(lease.fence > 0);

    // The system's roots do not know the private CA: nothing is served.
    let unverified = BrokerProcess::start_logged(
        &url,
        &[
            "--store-client-cert",
            &client_cert,
            "--store-client-key",
            &client_key,
        ],
        None,
    )
    .await;
    let refused = unverified
        .client()
        .await
        .acquire(acquire_req("rediss/b", 5_000, "t", 0))
        .await
        .expect_err("served without verifying Redis");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
}

/// The CLI (and the Rust client under it) reaches a broker with mutual TLS
/// given --broker-ca, --client-cert and --client-key; without a client
/// certificate it is refused and exits 69.
#[tokio::test]
async fn the_cli_speaks_mutual_tls() {
    let dir = scratch("cli");
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let (cert, key) = write_server(&dir, &server_ca.issue(&["localhost", "127.0.0.1"]));
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let clients_ca = write("clients.crt", &client_ca.pem);
    let broker_ca = write("broker-ca.crt", &server_ca.pem);
    let (client_cert, client_key) = client_ca.issue(&["cli.example"]);
    let (client_cert, client_key) = (
        write("cli.crt", &client_cert),
        write("cli.key", &client_key),
    );
    let broker = BrokerProcess::start_logged(
        "memory",
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &clients_ca,
        ],
        None,
    )
    .await;
    let url = format!("https://{}", broker.addr);
    let acquire = |extra: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["acquire", "--broker", &url, "--broker-ca", &broker_ca])
            .args([
                "--lock",
                &format!("tls/cli/{}", common::free_port()),
                "--ttl",
                "5s",
            ])
            .args(extra)
            .output()
    };

    let granted = acquire(&["--client-cert", &client_cert, "--client-key", &client_key])
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&granted.stdout);
    assert!(
        granted.status.success() && stdout.contains("LEASEHOLD_FENCE="),
        "{stdout}\n{}",
        String::from_utf8_lossy(&granted.stderr)
    );

    let refused = acquire(&[]).await.unwrap();
    assert_eq!(
        refused.status.code(),
        Some(69),
        "without a client certificate: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
