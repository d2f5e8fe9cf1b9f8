//! TLS to PostgreSQL with rustls (the TLS stack the rest of the broker
//! uses), as tokio-postgres' `MakeTlsConnect`: a few lines over tokio-rustls
//! instead of another crate.
//!
//! `sslmode` decides, but more strictly than libpq: `require`, `verify-ca`
//! and `verify-full` all verify the server's certificate, chain and name
//! (libpq's verify-full), against `--store-ca` or else the system's roots:
//! an unverified TLS connection stops no one in the middle, and a lock store
//! in the hands of one is a lock granted twice. `prefer` (the default when
//! the URL names none) is libpq's: TLS when the server offers it, its
//! certificate unchecked, plain text when it does not. Checking it there
//! would add nothing, since whoever can forge a certificate can as well
//! answer that the server has no TLS; what `prefer` buys is a connection
//! to a server that accepts TLS only (pg_hba `hostssl`) and privacy from
//! those who only listen. `disable` is plain text.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls::{
    self,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName, UnixTime},
    ClientConfig, ConfigBuilder, DigitallySignedStruct, RootCertStore, SignatureScheme,
    WantsVerifier,
};

use crate::error::{Error, Result};

/// The connector every PostgreSQL connection of a store uses: `None` for
/// plain text (the URL's sslmode is then `disable`, so it is never asked
/// to connect).
#[derive(Clone)]
pub(super) struct Tls {
    config: Option<Arc<ClientConfig>>,
}

impl Tls {
    /// Plain text.
    pub(super) fn none() -> Self {
        Tls { config: None }
    }

    /// Verifying TLS: the server's certificate must chain to `ca` (PEM), or
    /// to the system's roots without it; `client` is a certificate and key
    /// (PEM) for a server that asks for one.
    pub(super) fn verifying(
        ca: Option<&[u8]>,
        client: Option<&(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self> {
        let mut roots = RootCertStore::empty();
        match ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| bad("reading --store-ca", &e))?;
                    roots
                        .add(cert)
                        .map_err(|e| bad("a --store-ca certificate", &e))?;
                }
                if roots.is_empty() {
                    return Err(Error::InvalidArgument(
                        "PostgreSQL TLS: --store-ca holds no certificate".into(),
                    ));
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        let (builder, _) = builder()?;
        Self::finish(builder.with_root_certificates(roots), client)
    }

    /// libpq's `prefer`: TLS whatever certificate the server shows (the
    /// handshake's signatures are still checked: the server holds the key
    /// of the certificate it shows), or plain text if it has no TLS.
    pub(super) fn unverified(client: Option<&(Vec<u8>, Vec<u8>)>) -> Result<Self> {
        let (builder, provider) = builder()?;
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)));
        Self::finish(builder, client)
    }

    fn finish(
        builder: ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
        client: Option<&(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self> {
        let config = match client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| bad("reading --store-client-cert", &e))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| bad("reading --store-client-key", &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("the client certificate", &e))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Tls {
            config: Some(Arc::new(config)),
        })
    }
}

fn bad(what: &str, e: &dyn std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("PostgreSQL TLS: {what}: {e}"))
}

/// A client config builder on ring with the safe protocol versions, and
/// its provider.
fn builder() -> Result<(
    ConfigBuilder<ClientConfig, WantsVerifier>,
    Arc<CryptoProvider>,
)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", &e))?;
    Ok((builder, provider))
}

/// `prefer`'s verifier: any certificate, but a genuine handshake with it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One connection's handshake: the config and the name to verify.
pub(super) struct Handshake {
    config: Option<Arc<ClientConfig>>,
    name: std::result::Result<ServerName<'static>, String>,
}

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Handshake;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Handshake> {
        // A bad name fails the handshake, not this call: tokio-postgres
        // asks even when the connection will be plain text.
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| format!("'{domain}' is not a server name: {e}"));
        Ok(Handshake {
            config: self.config.clone(),
            name,
        })
    }
}

impl<S> TlsConnect<S> for Handshake
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS to PostgreSQL is not configured"))?;
            let name = self.name.map_err(io::Error::other)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(Stream(tls))
        })
    }
}

/// A TLS connection to PostgreSQL.
pub(super) struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    /// None: SCRAM then runs without channel binding (SCRAM-SHA-256, not
    /// -PLUS); the verified certificate already binds the server.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
