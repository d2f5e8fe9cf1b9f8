//! The process's one TLS crypto provider: ring.
//!
//! The TLS configurations the broker builds itself name ring
//! (`service/tls.rs`, `store/postgres/tls.rs`). Two of its store clients
//! take the process's default provider instead: the Redis client
//! (`rustls::ClientConfig::builder()`) and the ZooKeeper client. rustls
//! finds a default by itself only when one provider is built, and
//! zookeeper-client's `tls` feature builds aws-lc-rs beside ring (its
//! rustls dependency keeps rustls' default features): with two, a
//! `builder()` panics unless a default was installed. [`install`] installs
//! ring; `Store::open` calls it before any store client exists.

/// Installs ring as the process's default provider, unless one already is
/// (an embedder's choice stays).
pub fn install() {
    if tokio_rustls::rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile; it stays.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_default_provider_is_installed_once() {
        super::install();
        let first = tokio_rustls::rustls::crypto::CryptoProvider::get_default()
            .expect("installed")
            .clone();
        super::install();
        let second = tokio_rustls::rustls::crypto::CryptoProvider::get_default().expect("kept");
        assert!(std::sync::Arc::ptr_eq(&first, second));
    }
}
