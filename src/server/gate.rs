//! Who is calling: turns a request's credentials (its `authorization`
//! metadata, its connection's client certificate) into a [`Caller`], and
//! admits it under the rate caps. The only place that reads credentials.

use std::sync::Arc;

use tonic::{metadata::MetadataMap, Request};

use super::conn::ConnInfo;
use crate::{
    auth::Auth,
    error::{Error, Result},
    lease::{Caller, Permissions, Tenants, Usage},
    metrics::Rejection,
};

/// The gate every Leasehold call passes.
pub struct Gate {
    /// The credentials, if authentication is on (`--auth-file`).
    pub auth: Option<Arc<Auth>>,
    /// The tenants and their caps.
    pub tenants: Tenants,
    /// Without authentication: whether every caller may revoke.
    pub enable_revoke: bool,
}

impl Gate {
    /// The caller of `request`, admitted under the rate caps; fails with
    /// UNAUTHENTICATED, or RESOURCE_EXHAUSTED past a rate cap.
    pub fn caller<T>(&self, request: &Request<T>) -> Result<Caller> {
        let info = request.extensions().get::<ConnInfo>();
        let (usage, id, cert_names) = match info {
            Some(info) => (Arc::clone(&info.usage), info.id, &info.cert_names[..]),
            // Served over a transport of the embedder's (tests with an
            // in-process channel): a connection of its own per call.
            None => (Usage::connection(self.tenants.conn_caps()), 0, &[][..]),
        };
        let caller = match &self.auth {
            None => Caller::new(
                self.tenants.root(),
                Permissions {
                    use_locks: true,
                    admin: self.enable_revoke,
                },
                usage,
                id,
            ),
            Some(auth) => {
                let grant = bearer(request.metadata())
                    .and_then(|token| auth.authenticate(token, cert_names))
                    .inspect_err(|e| {
                        self.tenants.rejected(Rejection::Unauthenticated);
                        // The message says what was missing, never what
                        // was sent.
                        tracing::debug!(peer = ?info.map(|i| i.peer), error = %e, "call refused: unauthenticated");
                    })?;
                Caller::new(
                    self.tenants.get(&grant.tenant),
                    grant.permissions,
                    usage,
                    id,
                )
            }
        };
        caller.admit()?;
        Ok(caller)
    }
}

/// The token of an `authorization: Bearer <token>` header, if there is one.
fn bearer(metadata: &MetadataMap) -> Result<Option<&str>> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let malformed = || {
        Error::Unauthenticated(
            "the authorization metadata must be `Bearer <token>` (RFC 6750)".into(),
        )
    };
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(malformed());
    }
    Ok(Some(token.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn bearer_tokens_are_read_and_other_schemes_refused() {
        assert_eq!(bearer(&MetadataMap::new()).unwrap(), None);
        assert_eq!(bearer(&with("Bearer lh_abc")).unwrap(), Some("lh_abc"));
        assert_eq!(bearer(&with("bearer  lh_abc ")).unwrap(), Some("lh_abc"));
        for bad in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "lh_abc"] {
            let e = bearer(&with(bad)).unwrap_err();
            assert!(matches!(e, Error::Unauthenticated(_)), "{bad}: {e:?}");
            // The value sent is never repeated.
            assert!(!e.to_string().contains("dXNlcjpwYXNz"));
        }
    }
}
