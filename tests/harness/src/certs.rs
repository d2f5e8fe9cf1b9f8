//! Test certificates, generated per test with rcgen: no private key is
//! ever committed.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

/// A certificate authority that signs server and client certificates.
pub struct Ca {
    /// The CA certificate (PEM).
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A fresh self-signed CA whose common name is `name` (its key
    /// generated here, kept in memory only).
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names` (DNS names or IP addresses): (cert PEM,
    /// key PEM).
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(ToString::to_string).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A fresh directory for one test's files.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-tls-{test}-{}-{}",
        std::process::id(),
        super::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the server's certificate and key (atomically, as a Secret volume
/// update does) and returns their paths.
pub fn write_server(dir: &Path, (cert, key): &(String, String)) -> (String, String) {
    let write = |name: &str, text: &str| {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
        dir.join(name).to_string_lossy().into_owned()
    };
    (write("server.crt", cert), write("server.key", key))
}

impl Ca {
    /// A client certificate with common name `cn` and the URI subject
    /// alternative names `uris` (SPIFFE IDs...): (cert PEM, key PEM).
    pub fn issue_client(&self, cn: &str, uris: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
