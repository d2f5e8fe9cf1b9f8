//! Tokens of two tenants and an administrator, in an auth file: what the
//! tests of tenant scoping (listing, the JSON API, the status page) share.

use std::path::PathBuf;

use leasehold_server::auth::{generate_token, token_credential};

/// Bearer tokens of `payments` and `billing` (the `use` permission) and of
/// `ops` (`admin` only), and the auth file that names them.
pub struct TenantTokens {
    /// Tenant `payments`' token.
    pub payments: String,
    /// Tenant `billing`'s token.
    pub billing: String,
    /// Tenant `ops`' token: an administrator's.
    pub ops: String,
    /// The auth file (`--auth-file`).
    pub file: PathBuf,
}

impl TenantTokens {
    /// Fresh tokens, written into an auth file in a scratch folder of
    /// `test`.
    pub fn new(test: &str) -> Self {
        let token = || generate_token().expect("a random token");
        let (payments, billing, ops) = (token(), token(), token());
        let file = crate::certs::scratch(test).join("auth");
        std::fs::write(
            &file,
            format!(
                "payments use {}\nbilling use {}\nops admin {}\n",
                token_credential(&payments),
                token_credential(&billing),
                token_credential(&ops),
            ),
        )
        .expect("write the auth file");
        TenantTokens {
            payments,
            billing,
            ops,
            file,
        }
    }
}
