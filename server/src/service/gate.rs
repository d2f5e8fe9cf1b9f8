//! Who is calling: turns a request's credentials (its `authorization`
//! metadata, its connection's client certificate) into a [`Caller`], and
//! admits it under the rate caps. The only place that reads credentials.

use std::sync::Arc;

use tokio::sync::watch;
use tonic::{metadata::MetadataMap, Request, Status};

use super::conn::ConnInfo;
use crate::{
    auth::{hash_token, Auth, Grant},
    error::{Error, Result},
    lease::{Caller, Permissions, Tenants, Usage},
    metrics::{Metrics, Rejection},
};

/// The gate every Leasehold call passes.
pub struct Gate {
    /// The credentials, if authentication is on (`--auth-file`).
    pub auth: Option<Arc<Auth>>,
    /// The tenants and their caps.
    pub tenants: Tenants,
    /// Without authentication: whether every caller may revoke.
    pub enable_revoke: bool,
    /// Counts the refused credentials.
    pub metrics: Metrics,
    /// Set while the store is refused as unsafe (`--store-unsafe=refuse`):
    /// every call then fails UNAVAILABLE, saying why.
    pub refusal: super::health::Refusal,
}

impl Gate {
    /// Authenticates a call from its headers alone (the `authorization`
    /// value and the connection's certificate names), before anything of
    /// its body is read: what an unknown caller sends is never buffered.
    /// `Ok(None)` without authentication; a refusal is counted.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        info: Option<&ConnInfo>,
    ) -> Result<Option<Grant>> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let cert_names = info.map_or(&[][..], |i| &i.cert_names[..]);
        bearer(authorization)
            .and_then(|token| auth.authenticate(token, cert_names))
            .map(Some)
            .inspect_err(|e| {
                self.metrics.rejected(Rejection::Unauthenticated);
                // The message says what was missing, never what was sent.
                tracing::debug!(peer = ?info.map(|i| i.peer), error = %e, "call refused: unauthenticated");
            })
    }

    /// The caller of `request`, admitted under the rate caps; fails with
    /// UNAUTHENTICATED, UNAVAILABLE while the store is refused as unsafe
    /// (`--store-unsafe=refuse`), or RESOURCE_EXHAUSTED past a rate cap. Uses what
    /// the admission layer found from the headers ([`Admitted`]) when it
    /// ran, and authenticates here otherwise (a transport of an
    /// embedder's, without the layer).
    pub fn caller<T>(&self, request: &Request<T>) -> Result<Caller> {
        let info = request.extensions().get::<ConnInfo>();
        let (usage, id) = match info {
            Some(info) => (Arc::clone(&info.usage), info.id),
            // Served over a transport of the embedder's (tests with an
            // in-process channel): a connection of its own per call.
            None => (Usage::connection(self.tenants.conn_caps()), 0),
        };
        let grant = match request.extensions().get::<Admitted>() {
            Some(Admitted(grant)) => Some(grant.clone()),
            None => self.authenticate(authorization(request.metadata()), info)?,
        };
        let caller = match grant {
            None => Caller::new(
                self.tenants.root(),
                Permissions {
                    use_locks: true,
                    admin: self.enable_revoke,
                },
                usage,
                id,
            ),
            Some(grant) => Caller::new(
                self.tenants.get(&grant.tenant),
                grant.permissions,
                usage,
                id,
            ),
        };
        // After authentication: only a known caller learns the store's
        // settings.
        self.refusal.check()?;
        caller.admit()?;
        Ok(caller)
    }

    /// What a stream (KeepAlive, Observe) of `caller` was admitted with, to
    /// look at again whenever the auth file is reloaded: credentials are
    /// checked when a stream opens, and a token removed later must not keep
    /// its leases alive. `None` without authentication.
    pub fn stream_credential<T>(
        &self,
        request: &Request<T>,
        caller: &Caller,
    ) -> Option<StreamCredential> {
        let auth = self.auth.as_ref()?;
        let cert_names = request
            .extensions()
            .get::<ConnInfo>()
            .map(|info| info.cert_names.clone())
            .unwrap_or_default();
        Some(StreamCredential {
            auth: Arc::clone(auth),
            // Admitted, so readable; kept as its hash, not the token.
            bearer: bearer(authorization(request.metadata()))
                .ok()
                .flatten()
                .map(hash_token),
            cert_names,
            tenant: caller.tenant().id().to_owned(),
            reloads: auth.reloads(),
            metrics: self.metrics.clone(),
        })
    }
}

/// The credential a stream was admitted with (the bearer token's hash, the
/// client certificate's names) and the tenant it was admitted into.
pub struct StreamCredential {
    auth: Arc<Auth>,
    bearer: Option<[u8; 32]>,
    cert_names: Arc<[String]>,
    tenant: String,
    reloads: watch::Receiver<u64>,
    metrics: Metrics,
}

impl StreamCredential {
    /// Resolves when a reload of the auth file took away what the stream
    /// was admitted with: its credential (UNAUTHENTICATED), its tenant or
    /// its `use` permission (PERMISSION_DENIED). The stream then ends with
    /// that status; its leases are no longer renewed and run out at their
    /// TTL, as for any broken stream. Never resolves otherwise.
    pub async fn withdrawn(&mut self) -> Status {
        loop {
            if self.reloads.changed().await.is_err() {
                return std::future::pending().await;
            }
            let (reason, error) = match self
                .auth
                .authenticate_hashed(self.bearer.as_ref(), &self.cert_names)
            {
                Err(_) => (
                    Rejection::Unauthenticated,
                    Error::Unauthenticated(
                        "the credential this stream was opened with is no longer in the \
                             broker's --auth-file (reloaded): its leases are not renewed any \
                             more"
                            .into(),
                    ),
                ),
                Ok(grant) if grant.tenant != self.tenant => (
                    Rejection::PermissionDenied,
                    Error::PermissionDenied(format!(
                        "the credential this stream was opened with now belongs to tenant \
                             '{}', not '{}' (reloaded --auth-file): its leases are not renewed \
                             any more; open a new stream",
                        grant.tenant, self.tenant
                    )),
                ),
                Ok(grant) if !grant.permissions.use_locks => (
                    Rejection::PermissionDenied,
                    Error::PermissionDenied(
                        "the credential this stream was opened with lost the `use` \
                             permission (reloaded --auth-file): its leases are not renewed any \
                             more"
                            .into(),
                    ),
                ),
                Ok(_) => continue,
            };
            self.metrics.rejected(reason);
            tracing::info!(tenant = %self.tenant, error = %error, "stream ended: credential withdrawn");
            return Status::from(error);
        }
    }
}

/// Waits for `credential` to be withdrawn, or forever when there is none
/// (no authentication).
pub async fn withdrawn(credential: &mut Option<StreamCredential>) -> Status {
    match credential {
        Some(credential) => credential.withdrawn().await,
        None => std::future::pending().await,
    }
}

/// The credential the admission layer found in a call's headers (a request
/// extension), so the handler does not look again.
#[derive(Clone, Debug)]
pub struct Admitted(pub Grant);

/// The raw `authorization` value of a call.
fn authorization(metadata: &MetadataMap) -> Option<&[u8]> {
    metadata
        .get("authorization")
        .map(tonic::metadata::MetadataValue::as_encoded_bytes)
}

/// The token of an `authorization: Bearer <token>` header value, if there
/// is one.
fn bearer(value: Option<&[u8]>) -> Result<Option<&str>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let malformed = || {
        Error::Unauthenticated(
            "the authorization metadata must be `Bearer <token>` (RFC 6750)".into(),
        )
    };
    let value = std::str::from_utf8(value).map_err(|_| malformed())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(malformed());
    }
    Ok(Some(token.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> Option<&[u8]> {
        Some(value.as_bytes())
    }

    #[test]
    fn bearer_tokens_are_read_and_other_schemes_refused() {
        assert_eq!(bearer(None).unwrap(), None);
        assert_eq!(bearer(with("Bearer lh_abc")).unwrap(), Some("lh_abc"));
        assert_eq!(bearer(with("bearer  lh_abc ")).unwrap(), Some("lh_abc"));
        for bad in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "lh_abc"] {
            let e = bearer(with(bad)).unwrap_err();
            assert!(matches!(e, Error::Unauthenticated(_)), "{bad}: {e:?}");
            // The value sent is never repeated.
            assert!(!e.to_string().contains("dXNlcjpwYXNz"));
        }
    }
}
