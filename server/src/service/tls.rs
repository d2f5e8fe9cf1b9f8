//! TLS on the gRPC port: the server certificate and key from PEM files,
//! optionally a client CA that makes TLS mutual (clients must present a
//! certificate it signed), and reloading all three without a restart
//! (`SIGHUP`): certificates are rotated by replacing the files (cert-manager,
//! a Kubernetes Secret volume) and a restart would drop every KeepAlive
//! stream.
//!
//! Handshakes run in a task per connection with a deadline (see `conn`).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use tokio_rustls::{
    rustls::{
        self,
        pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
        server::WebPkiClientVerifier,
        RootCertStore, ServerConfig,
    },
    TlsAcceptor,
};

use crate::error::{Error, Result};

/// Where the TLS material is (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; `None`
    /// for server-only TLS.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The files `config` names, if TLS is on (both --tls-cert and
    /// --tls-key given).
    pub fn of(config: &crate::config::ServeConfig) -> Option<Self> {
        Some(TlsFiles {
            cert: config.tls_cert.clone()?,
            key: config.tls_key.clone()?,
            client_ca: config.tls_client_ca.clone(),
        })
    }
}

/// The server's TLS configuration, swapped whole on reload.
pub struct Tls {
    files: TlsFiles,
    config: RwLock<Configs>,
}

/// The configuration of each port: the same certificates and client CA,
/// told apart by the protocols offered (ALPN).
struct Configs {
    /// The gRPC port's: HTTP/2 only.
    grpc: Arc<ServerConfig>,
    /// The HTTP/JSON API's: HTTP/2 or HTTP/1.1 (a client offering only
    /// `http/1.1`, as many HTTP libraries do, would fail the handshake
    /// with the gRPC port's).
    http: Arc<ServerConfig>,
}

impl Configs {
    fn of(grpc: ServerConfig) -> Self {
        let mut http = grpc.clone();
        http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Configs {
            grpc: Arc::new(grpc),
            http: Arc::new(http),
        }
    }
}

impl Tls {
    /// Loads the files; an unreadable or invalid file is an error naming it.
    pub fn load(files: TlsFiles) -> Result<Self> {
        let config = build(&files)?;
        Ok(Tls {
            files,
            config: RwLock::new(Configs::of(config)),
        })
    }

    /// Reads the files again. On success new connections use them (those
    /// already open keep their session); on error the current configuration
    /// stays.
    pub fn reload(&self) -> Result<()> {
        let config = Configs::of(build(&self.files)?);
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        Ok(())
    }

    /// An acceptor with the current configuration, offering HTTP/2 only
    /// (the gRPC port), or HTTP/1.1 too (`http2_only` false: the JSON API).
    pub(super) fn acceptor(&self, http2_only: bool) -> TlsAcceptor {
        let configs = self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        TlsAcceptor::from(Arc::clone(if http2_only {
            &configs.grpc
        } else {
            &configs.http
        }))
    }

    /// The files, for watching.
    pub fn paths(&self) -> Vec<PathBuf> {
        let f = &self.files;
        [Some(&f.cert), Some(&f.key), f.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }
}

fn invalid(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{what} {}: {e}", path.display()))
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid(path, what, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, what, e))?;
    if certs.is_empty() {
        return Err(invalid(path, what, "no PEM certificate in the file"));
    }
    Ok(certs)
}

fn build(files: &TlsFiles) -> Result<ServerConfig> {
    let chain = certificates(&files.cert, "--tls-cert")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| invalid(&files.key, "--tls-key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(format!("TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "--tls-client-ca")? {
                roots
                    .add(cert)
                    .map_err(|e| invalid(ca, "--tls-client-ca", e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid(ca, "--tls-client-ca", e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| invalid(&files.key, "--tls-cert/--tls-key", e))?;
    // gRPC is HTTP/2 only.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
