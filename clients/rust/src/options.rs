//! How to call: acquire options, credentials, TLS.

use std::time::Duration;

use leasehold_proto::leasehold_service_client::LeaseholdServiceClient;
use tonic::{
    metadata::{Ascii, MetadataValue},
    transport::Channel,
};

use crate::{Broker, ClientError};

/// How to acquire.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) holder: String,
    pub(crate) margin: Option<Duration>,
    pub(crate) lock_delay: Duration,
    pub(crate) limit: u32,
    pub(crate) ttl_auto: bool,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl AcquireOptions {
    /// TTL 10 s, no wait, holder `hostname:pid`, safety margin a tenth of
    /// the TTL.
    pub fn new() -> Self {
        AcquireOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::ZERO,
            holder: default_holder(),
            margin: None,
            lock_delay: Duration::ZERO,
            limit: 1,
            ttl_auto: false,
        }
    }

    /// Make the name a semaphore: up to `limit` leases at once (each with
    /// its own token and fence). Every caller of the name must agree on it.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Lock-delay: if this lease ends involuntarily (expiry, revoke), nobody
    /// gets the lock for this long afterwards. Default: none.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// How long before the computed deadline the lease counts as lost:
    /// time for the application to stop writing (and for timers firing late)
    /// before the broker could expire the lease. Default: a tenth of the TTL.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// The lease TTL (renewed every third of it).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.ttl_auto = false;
        self
    }

    /// Let the broker choose the TTL from the heartbeat round trips it
    /// measured (10 times their p99, at least its `--ttl-auto-floor`,
    /// within its bounds), and renew the lease for the TTL it suggests at
    /// each heartbeat, so that the TTL follows the latency. The lease's
    /// [`Lease::ttl`](crate::Lease::ttl) tells the TTL in force. The safety
    /// margin, unless set, is a tenth of that TTL.
    pub fn ttl_auto(mut self) -> Self {
        self.ttl_auto = true;
        self
    }

    /// How long to wait if the lock is held (0: try once). A wait longer
    /// than the broker's --max-wait is a chain of calls that keep their
    /// place in line; `Duration::MAX` waits without end.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Wait as long as it takes (until the future is dropped).
    pub fn wait_forever(self) -> Self {
        self.wait(Duration::MAX)
    }

    /// The label shown to others by Describe.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }
}

/// `hostname:pid`, so an operator can find the holder.
///
/// The host name is read once per process: reading it from /proc on every
/// acquire (open, read, close) was the largest item in a profile of the
/// client, a tenth of its CPU per acquire+release cycle (BENCHMARKS.md,
/// "Client overhead: history": the `leasehold-bench floor` profile). The
/// pid is asked each time: a forked child is
/// a holder of its own.
pub fn default_holder() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown".into())
    });
    format!("{host}:{}", std::process::id())
}

/// The credentials sent with every call: a bearer token, for brokers with
/// an `--auth-file`. (A client certificate is part of [`ClientTls`].)
#[derive(Clone, Default)]
pub struct Credentials {
    bearer: Option<MetadataValue<Ascii>>,
}

impl Credentials {
    /// Sends `authorization: Bearer <token>` (`None`: no token).
    pub fn bearer(token: Option<&str>) -> Result<Self, ClientError> {
        let bearer = token
            .map(|t| {
                let mut value =
                    MetadataValue::try_from(format!("Bearer {}", t.trim())).map_err(|_| {
                        ClientError::Config(
                            "the bearer token has characters a header cannot carry".into(),
                        )
                    })?;
                // HPACK never-indexed: kept out of header tables and logs.
                value.set_sensitive(true);
                Ok::<_, ClientError>(value)
            })
            .transpose()?;
        Ok(Credentials { bearer })
    }

    /// A client of `channel` sending these credentials.
    pub fn client(&self, channel: Channel) -> Broker {
        LeaseholdServiceClient::with_interceptor(channel, self.clone())
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(bearer) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
        }
        Ok(request)
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Credentials")
            .field("bearer", &self.bearer.is_some())
            .finish()
    }
}

/// How a [`Client`] connects: TLS for `https://` brokers, and a bearer
/// token for brokers that require one.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// TLS settings (`None`: the system's roots, no client certificate).
    pub tls: Option<ClientTls>,
    /// The credentials sent with every call.
    pub credentials: Credentials,
    /// Use a unary call per acquire, release and renewal, and a KeepAlive
    /// stream for heartbeats, instead of the one Session stream (the
    /// default, which costs the broker about half per request). A broker
    /// without the Session call gets unary calls either way.
    pub unary: bool,
}

/// TLS settings for `https://` brokers.
#[derive(Clone, Default)]
pub struct ClientTls {
    /// CA certificates (PEM) the broker's certificate must chain to;
    /// `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate and its key (PEM), for a broker with mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// tonic's TLS configuration for these settings.
    pub fn config(tls: Option<&ClientTls>) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new();
        match tls.and_then(|t| t.ca_pem.as_ref()) {
            Some(ca) => config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca)),
            None => config = config.with_native_roots(),
        }
        if let Some((cert, key)) = tls.and_then(|t| t.identity.as_ref()) {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("identity", &self.identity.is_some())
            .finish()
    }
}
