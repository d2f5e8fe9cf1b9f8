//! The network side: the gRPC server (Leasehold API, health, reflection),
//! the HTTP metrics endpoint and, if asked for, the HTTP/JSON API and
//! status page (`gateway`), started and stopped together by [`run`].

mod admit;
mod conn;
mod deadlines;
mod gate;
pub mod gateway;
mod grpc;
mod health;
mod http;
mod keepalive;
mod session;
mod status;
pub mod tls;

use std::{future::Future, sync::Arc};

use tokio::{
    net::TcpListener,
    sync::{watch, Semaphore},
};

pub use self::{conn::ConnInfo, gate::Gate, grpc::LeaseholdApi};
use crate::{
    auth::Auth,
    config::ServeConfig,
    error::{Error, Result},
    lease::{census, Events, Leases, Tenants},
    metrics::Metrics,
    proto::{self, leasehold_service_server::LeaseholdServiceServer},
    store::Store,
};

/// Serves on the given listeners until `shutdown` resolves, then stops
/// accepting, ends every waiting Acquire with UNAVAILABLE, finishes the calls
/// in flight and returns.
///
/// Taking bound listeners (rather than addresses) lets tests bind
/// `127.0.0.1:0` and learn the port before the server starts.
pub async fn run(
    grpc: TcpListener,
    metrics_listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let http = match config.http_listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
            Error::InvalidArgument(format!("cannot listen on {addr} (--http-listen): {e}"))
        })?),
        None => None,
    };
    run_listening(grpc, metrics_listener, http, config, shutdown).await
}

/// [`run`], with the HTTP/JSON API on `http` (bound already, like the
/// others: a test binds `127.0.0.1:0`) rather than at `--http-listen`.
pub async fn run_listening(
    grpc: TcpListener,
    metrics_listener: TcpListener,
    http: Option<TcpListener>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    config.check().map_err(Error::InvalidArgument)?;
    // Loaded before anything starts: a bad certificate stops the broker at
    // once, with the file named.
    let tls = match tls::TlsFiles::of(&config) {
        Some(files) => Some(Arc::new(tls::Tls::load(files)?)),
        None => None,
    };
    let auth = match &config.auth_file {
        Some(path) => Some(Arc::new(Auth::load(path)?)),
        None => None,
    };
    let store = Store::open(
        &config.store,
        &config.store_options().map_err(Error::InvalidArgument)?,
    )?;
    let metrics = Metrics::new();
    let limits = config.limits.limits();
    // The lease rules report to the metrics (metrics.rs maps each event).
    let events: Arc<dyn Events> = Arc::new(metrics.clone());
    let leases = Leases::new(store, limits.clone(), Arc::clone(&events));
    let refusal = health::Refusal::default();
    let gateway_refusal = refusal.clone();
    let gate = Arc::new(Gate {
        auth: auth.clone(),
        tenants: Tenants::new(limits.tenant_caps(), limits.conn_caps(), events),
        enable_revoke: config.enable_revoke,
        metrics: metrics.clone(),
        refusal: refusal.clone(),
    });
    // One budget for the requests being received on both ports.
    let budget = Arc::new(admit::Budget::new(
        config.max_buffer,
        config.conn_max_buffer,
        config.max_message_size,
        metrics.clone(),
    ));
    let admission = admit::Admission::new(Arc::clone(&gate), Arc::clone(&budget));
    // The HTTP/JSON API's connections are accepted alike, with slots of
    // their own: a flood of HTTP clients never takes the room of the gRPC
    // clients that renew leases.
    let acceptor = |http2_only| conn::Acceptor {
        tls: tls.clone(),
        slots: Arc::new(Semaphore::new(config.max_connections)),
        handshake_timeout: config.handshake_timeout,
        caps: limits.conn_caps(),
        metrics: metrics.clone(),
        http2_only,
    };
    let http_acceptor = http.as_ref().map(|_| acceptor(false));
    let acceptor = acceptor(true);

    let (stop_tx, stop_rx) = watch::channel(false);
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let gateway_health =
        tonic_health::server::HealthService::from_health_reporter(health_reporter.clone());
    tokio::spawn(health::watch_store(
        leases.clone(),
        metrics.clone(),
        health_reporter,
        config.health_interval,
        config.store_unsafe,
        refusal.clone(),
        stop_rx.clone(),
    ));
    metrics
        .census_interval
        .set(if config.census_max_names == 0 {
            0.0
        } else {
            config.census_interval.as_secs_f64()
        });
    let census_stop = config.store_timeout * 2;
    let census = tokio::spawn(census::run(
        leases.clone(),
        (config.census_interval, config.census_max_names),
        move || refusal.allows_own_writes(),
        {
            let metrics = metrics.clone();
            move |census| metrics.census(census)
        },
        stop_rx.clone(),
    ));
    let metrics_addr = metrics_listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    tokio::spawn(http::serve(
        metrics_listener,
        http::Bounds {
            max_connections: config.metrics_max_connections,
            timeout: config.metrics_timeout,
        },
        metrics,
        stop_rx.clone(),
    ));
    if auth.is_some() && tls.is_none() {
        tracing::warn!(
            "--auth-file without --tls-cert: bearer tokens cross the network in clear text"
        );
    }

    // Reflection in both versions: grpcurl and other tools older than the
    // v1 service still ask v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error =
        |e: tonic_reflection::server::Error| Error::Internal(format!("reflection service: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

    let api = Arc::new(LeaseholdApi::new(
        leases.clone(),
        Arc::clone(&gate),
        config.max_concurrent_streams as usize,
    ));
    let http_addr = match (http, http_acceptor) {
        (Some(listener), Some(acceptor)) => {
            let addr = listener
                .local_addr()
                .map_err(|e| Error::Internal(e.to_string()))?;
            tokio::spawn(gateway::serve(
                listener,
                acceptor,
                gateway::Gateway {
                    api: Arc::clone(&api),
                    gate: Arc::clone(&gate),
                    leases: leases.clone(),
                    health: gateway_health,
                    refusal: gateway_refusal,
                    max_body: config.max_message_size,
                    budget,
                    timeout: config.http_timeout,
                    max_streams: config.max_concurrent_streams,
                    ping: (config.ping_interval, config.ping_timeout),
                },
                stop_rx.clone(),
            ));
            Some(addr)
        }
        _ => None,
    };
    tracing::info!(
        grpc = %grpc.local_addr().map_err(|e| Error::Internal(e.to_string()))?,
        metrics = %metrics_addr,
        http = %http_addr.map_or("off".into(), |a| a.to_string()),
        store = %crate::redact::url(&config.store),
        tls = match &tls {
            None => "off",
            Some(tls) if tls.mutual() => "mutual",
            Some(_) => "on",
        },
        auth = %auth.as_ref().map_or("off".into(), |a| a.path().display().to_string()),
        "serving"
    );
    if tls.is_some() || auth.is_some() {
        let reloader = Reloader { tls, auth };
        if !config.reload_interval.is_zero() {
            tokio::spawn(until_stopped(
                reloader.clone().on_change(config.reload_interval),
                stop_rx.clone(),
            ));
        }
        tokio::spawn(until_stopped(reloader.on_sighup(), stop_rx));
    }
    let on_shutdown = leases.clone();
    warn_if_heartbeats_cannot_fit(&config);
    let router = tonic::transport::Server::builder()
        // A heartbeat naming thousands of leases fits the flow-control
        // window, instead of waiting for window updates mid-message.
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(4 << 20))
        // Pings find clients that vanished without closing the connection
        // (a partition, a host gone), so their streams end and are counted;
        // hyper pings idle connections too, so a client that finished its
        // handshake (conn.rs) and then stopped answering holds no slot.
        .http2_keepalive_interval(Some(config.ping_interval))
        .http2_keepalive_timeout(Some(config.ping_timeout))
        // Bounds on what one connection may ask of HTTP/2: streams open at
        // once (each an in-flight call), and header size (metadata is a
        // token and a few short fields; hyper's default is 16 MiB).
        .max_concurrent_streams(Some(config.max_concurrent_streams))
        .http2_max_header_list_size(Some(MAX_HEADER_LIST_SIZE))
        // Credentials from the headers, and the byte budgets, before any
        // body is read (admit.rs).
        .layer(admission)
        .add_service(health_service.max_decoding_message_size(config.max_message_size))
        .add_service(reflection_v1.max_decoding_message_size(config.max_message_size))
        .add_service(reflection_v1alpha.max_decoding_message_size(config.max_message_size))
        .add_service(
            LeaseholdServiceServer::from_arc(api)
                .max_decoding_message_size(config.max_message_size)
                .max_encoding_message_size(config.max_message_size),
        );
    let stopping = async move {
        shutdown.await;
        tracing::info!("shutting down: ending waits, finishing calls in flight");
        on_shutdown.begin_shutdown();
        let _ = stop_tx.send(true);
    };
    router
        .serve_with_incoming_shutdown(conn::incoming(grpc, acceptor), stopping)
        .await
        .map_err(|e| Error::Internal(format!("gRPC server: {e}")))?;
    // The census taker gives its lease up (one store call, bounded by the
    // store timeout), so that another replica takes the census at its next
    // interval rather than at the lease's expiry, and a stopped broker
    // leaves nothing held behind.
    let _ = tokio::time::timeout(census_stop, census).await;
    Ok(())
}

/// Runs `task` until the server stops.
async fn until_stopped(task: impl Future<Output = ()>, mut stop: watch::Receiver<bool>) {
    tokio::select! {
        () = task => {}
        _ = stop.wait_for(|stopped| *stopped) => {}
    }
}

/// Says so at start-up when a heartbeat naming `--max-stream-leases` leases
/// of the longest names would not fit `--max-message-size`: such a
/// heartbeat would fail with OUT_OF_RANGE rather than with the clear
/// `--max-stream-leases` refusal.
fn warn_if_heartbeats_cannot_fit(config: &ServeConfig) {
    // A LeaseRef: the name and 32-byte token with their tags and lengths, a
    // TTL varint, and its own tag and length: at most 51 bytes beyond the
    // name.
    let largest = config.limits.max_stream_leases * (config.limits.max_name_len + 51) + 16;
    if largest > config.max_message_size {
        tracing::warn!(
            "a heartbeat naming --max-stream-leases ({}) leases with names of --max-name-len \
             ({}) bytes takes {largest} bytes, over --max-message-size ({}): raise \
             --max-message-size (and --conn-max-buffer) or lower the others",
            config.limits.max_stream_leases,
            config.limits.max_name_len,
            config.max_message_size
        );
    }
}

/// The largest request header block accepted (HTTP/2 SETTINGS).
const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;

/// Reloads the TLS files and the auth file: on SIGHUP, and when a file
/// changes (Kubernetes updates a mounted Secret in place, and sends no
/// signal). A failed reload keeps what was loaded before and says why.
#[derive(Clone)]
struct Reloader {
    tls: Option<Arc<tls::Tls>>,
    auth: Option<Arc<Auth>>,
}

impl Reloader {
    async fn on_sighup(self) {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!(
                "cannot listen for SIGHUP: TLS and auth files will not be reloaded on it"
            );
            return;
        };
        while hangups.recv().await.is_some() {
            self.reload_tls();
            self.reload_auth();
        }
    }

    /// Looks at the files' modification times and sizes every `interval`
    /// and reloads what changed. Polling, not inotify: a Secret volume swaps
    /// a symlink, which file watchers miss unless they watch the directory,
    /// and a look every few seconds costs nothing.
    async fn on_change(self, interval: std::time::Duration) {
        let tls_files = self.tls.as_ref().map(|t| t.paths()).unwrap_or_default();
        let auth_files: Vec<_> = self.auth.iter().map(|a| a.path().to_owned()).collect();
        let (mut tls_seen, mut auth_seen) = (stamps(&tls_files), stamps(&auth_files));
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let (tls_now, auth_now) = (stamps(&tls_files), stamps(&auth_files));
            if tls_now != tls_seen {
                tls_seen = tls_now;
                self.reload_tls();
            }
            if auth_now != auth_seen {
                auth_seen = auth_now;
                self.reload_auth();
            }
        }
    }

    fn reload_tls(&self) {
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => tracing::info!("TLS certificate reloaded"),
                Err(e) => {
                    tracing::warn!(error = %e, "TLS reload failed; keeping the current certificate");
                }
            }
        }
    }

    fn reload_auth(&self) {
        if let Some(auth) = &self.auth {
            match auth.reload() {
                Ok(()) => tracing::info!("auth file reloaded"),
                Err(e) => {
                    tracing::warn!(error = %e, "auth file reload failed; keeping the current credentials");
                }
            }
        }
    }
}

/// What tells a changed file: modification time and size (following
/// symlinks), or nothing for a file that cannot be read now.
fn stamps(paths: &[std::path::PathBuf]) -> Vec<Option<(std::time::SystemTime, u64)>> {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}
